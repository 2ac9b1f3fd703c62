package faxsim

import (
	"crypto/sha1"
	"fmt"
	"hash/crc32"
	"net/http"
	"slices"
	"strings"

	"github.com/faxgate/faxgate/internal/base/httpjson"
)

// Messages of the number endpoints.
const (
	msgRequirementsFetched = "Filled requirements fetched successfully."
	msgNumberDeleted       = "Number deleted successfully."
	msgNumberNotFound      = "Number not found."
	msgCountryCodeSize     = "The country code must be 2 characters."
	msgCountryCodeLetters  = "The country code must only contain letters."
	msgCodeNumeric         = "The code must be a number."
)

// OwnedNumber is a phone number the simulated account owns, identified as
// numbers.delete identifies it: by the pair NumberID and OrderID.
type OwnedNumber struct {
	NumberID string `json:"number_id"`
	OrderID  string `json:"order_id"`
	Number   string `json:"number"` // international format with a leading "+"
}

// seedNumbers gives the account three numbers to delete.
func (s *Sim) seedNumbers() {
	s.numbers = []OwnedNumber{
		{NumberID: "num_1001", OrderID: "ord_5001", Number: "+14155550123"},
		{NumberID: "num_1002", OrderID: "ord_5002", Number: "+14155550124"},
		{NumberID: "num_1003", OrderID: "ord_5003", Number: "+12125550100"},
	}
}

// OwnedNumbers returns the numbers the account still owns, so tests can check
// that a delete really happened (or really did not).
func (s *Sim) OwnedNumbers() []OwnedNumber {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.numbers)
}

// countryCode validates country_code the way both number endpoints need it:
// required, two letters. It answers the request itself on failure.
func countryCode(w http.ResponseWriter, obj object) (string, bool) {
	cc, ok := requiredStr(w, obj, "country_code")
	switch {
	case !ok:
		return "", false
	case len(cc) != 2:
		writeFailure(w, http.StatusUnprocessableEntity, msgCountryCodeSize)
		return "", false
	case !isLetters(cc):
		writeFailure(w, http.StatusUnprocessableEntity, msgCountryCodeLetters)
		return "", false
	}
	return strings.ToUpper(cc), true
}

func isLetters(s string) bool {
	for _, r := range s {
		if (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') {
			return false
		}
	}
	return true
}

// filledRequirement is one element of the filled-requirements data.
type filledRequirement struct {
	ID            int     `json:"id"`
	RequirementID string  `json:"requirement_id"`
	Name          string  `json:"name"`
	Type          string  `json:"type"`
	CountryCode   string  `json:"country_code"`
	Value         *string `json:"value"`
	OtherData     string  `json:"other_data"`
}

// requirementNames are the regulatory requirements every country gets. The
// first one has a value saved, the others none, so clients see both shapes.
var requirementNames = [...]string{"Business name", "Business address", "End-user identity document"}

// filledRequirements derives a country's requirements from its code alone, so
// the same request always gets the same answer across runs and replicas.
func filledRequirements(cc string) []filledRequirement {
	base := int(crc32.ChecksumIEEE([]byte(cc))%90000) + 10000
	out := make([]filledRequirement, 0, len(requirementNames))
	for i, name := range requirementNames {
		fr := filledRequirement{
			ID:            base*10 + i,
			RequirementID: nameUUID("faxsim/requirement/" + cc + "/" + name),
			Name:          name,
			Type:          "textual",
			CountryCode:   cc,
		}
		if i == 0 {
			v := "Faxsim Demo Clinic"
			fr.Value = &v
		}
		out = append(out, fr)
	}
	return out
}

// nameUUID is a version 5 style UUID of name: stable and well-formed.
func nameUUID(name string) string {
	h := sha1.Sum([]byte(name))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// handleFilledRequirements lists a country's requirements (endpoint 6).
func (s *Sim) handleFilledRequirements(w http.ResponseWriter, c *call) {
	obj, ok := jsonObject(w, c)
	if !ok {
		return
	}
	cc, ok := countryCode(w, obj)
	if !ok {
		return
	}
	writeOK(w, msgRequirementsFetched, filledRequirements(cc))
}

// callingCodes are the countries the simulated carrier has stock in; other
// countries have no numbers available.
var callingCodes = map[string]string{"US": "+1", "CA": "+1", "GB": "+44", "DE": "+49", "FR": "+33", "AU": "+61"}

// handleAvailableList lists numbers for sale (endpoint 7): five per country and
// area code, derived from both so results are stable, all in the fictional
// 555-01xx range. The spec documents no message here, so none is sent.
func (s *Sim) handleAvailableList(w http.ResponseWriter, c *call) {
	obj, ok := jsonObject(w, c)
	if !ok {
		return
	}
	cc, ok := countryCode(w, obj)
	if !ok {
		return
	}
	code, ok := requiredStr(w, obj, "code")
	switch {
	case !ok:
		return
	case digits(code) != code:
		// "+1" or "1-415" is a calling prefix or formatting, not an area code.
		writeFailure(w, http.StatusUnprocessableEntity, msgCodeNumeric)
		return
	}
	nums := []string{}
	if prefix, ok := callingCodes[cc]; ok {
		seed := int(crc32.ChecksumIEEE([]byte(cc+"/"+code)) % 100)
		for i := range 5 {
			nums = append(nums, fmt.Sprintf("%s%s55501%02d", prefix, code, (seed+i*17)%100))
		}
	}
	httpjson.Write(w, http.StatusOK, envelope{Status: 1, Data: nums})
}

// handleNumberDelete removes an owned number (endpoint 8). Deletion is real:
// the same pair a second time is "Number not found.".
func (s *Sim) handleNumberDelete(w http.ResponseWriter, c *call) {
	obj, ok := jsonObject(w, c)
	if !ok {
		return
	}
	ids := [2]string{}
	for i, name := range []string{"number_id", "order_id"} {
		v, ok := requiredStr(w, obj, name)
		if !ok {
			return
		}
		ids[i] = v
	}
	s.mu.Lock()
	i := slices.IndexFunc(s.numbers, func(n OwnedNumber) bool { return n.NumberID == ids[0] && n.OrderID == ids[1] })
	if i >= 0 {
		s.numbers = slices.Delete(s.numbers, i, i+1)
	}
	s.mu.Unlock()
	if i < 0 {
		writeFailure(w, http.StatusNotFound, msgNumberNotFound)
		return
	}
	writeOK(w, msgNumberDeleted, nil)
}
