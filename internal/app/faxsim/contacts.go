package faxsim

import (
	"encoding/base64"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/faxgate/faxgate/internal/base/httpjson"
)

// Messages of the contact endpoints.
const (
	msgContactCreated   = "Contact created successfully."
	msgContactDetails   = "Contact details fetched successfully."
	msgContactsFetched  = "Contacts fetched successfully."
	msgContactNotFound  = "Contact not found."
	msgContactNotObject = "The contact must be a JSON object."
	msgNameRequired     = "The first name field is required when last name is not present."
	msgInvalidCursor    = "The cursor is invalid."
	msgLimitInteger     = "The limit must be an integer."
	msgLimitMin         = "The limit must be at least 1."
)

// maxPage caps one page of contacts.list, like any paged upstream.
const maxPage = 100

// timeLayout is the upstream's timestamp format: UTC, microseconds, "Z".
const timeLayout = "2006-01-02T15:04:05.000000Z"

// contact is one stored contact.
type contact struct {
	seq            int // creation order; cursors point into it
	id             string
	typ            string
	isOrganization bool
	firstName      string
	middleName     string
	lastName       string
	suffix         string
	email          string
	faxNumber      string
	dob            string
	gender         string
	isFavorite     bool
	isBlocked      bool
	createdAt      time.Time
	updatedAt      time.Time
}

// contactDetails is the details shape (endpoint 3).
type contactDetails struct {
	ID             string `json:"id"`
	IsOrganization bool   `json:"is_organization"`
	FirstName      string `json:"first_name"`
	LastName       string `json:"last_name"`
	Type           string `json:"type"`
}

// contactListItem is the list shape (endpoint 4).
type contactListItem struct {
	ID               string `json:"id"`
	IsOrganization   bool   `json:"is_organization"`
	FirstName        string `json:"first_name"`
	LastName         string `json:"last_name"`
	Type             string `json:"type"`
	PhoneNumber      string `json:"phone_number"`
	IsFavorite       bool   `json:"is_favorite"`
	IsBlocked        bool   `json:"is_blocked"`
	CreatedAt        string `json:"created_at"`
	UpdatedAt        string `json:"updated_at"`
	ContactDocuments []any  `json:"contact_documents"`
	Fields           []any  `json:"fields"`
	Groups           []any  `json:"groups"`
}

func (c *contact) details() contactDetails {
	return contactDetails{ID: c.id, IsOrganization: c.isOrganization, FirstName: c.firstName, LastName: c.lastName, Type: c.typ}
}

func (c *contact) listItem() contactListItem {
	return contactListItem{
		ID: c.id, IsOrganization: c.isOrganization, FirstName: c.firstName, LastName: c.lastName, Type: c.typ,
		PhoneNumber: digits(c.faxNumber), IsFavorite: c.isFavorite, IsBlocked: c.isBlocked,
		CreatedAt: c.createdAt.UTC().Format(timeLayout), UpdatedAt: c.updatedAt.UTC().Format(timeLayout),
		ContactDocuments: []any{}, Fields: []any{}, Groups: []any{},
	}
}

// digits keeps only ASCII digits: list shows phone numbers without the "+".
func digits(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, s)
}

// seedContacts stores the two demo contacts. Their ids and timestamps are
// fixed so demo instructions and tests can name them.
func (s *Sim) seedContacts() {
	s.contactByID = make(map[string]*contact)
	ada := time.Date(2024, 5, 1, 10, 20, 30, 123456000, time.UTC)
	clinic := time.Date(2024, 5, 2, 8, 0, 0, 1000, time.UTC)
	s.addContactLocked(&contact{
		id: seedID("contact-0001"), typ: "individual", firstName: "Ada", lastName: "Lovelace",
		email: "ada@example.com", faxNumber: "+14155550100", dob: "1815-12-10", gender: "female",
		isFavorite: true, createdAt: ada, updatedAt: ada,
	})
	s.addContactLocked(&contact{
		id: seedID("contact-0002"), typ: "organization", isOrganization: true, firstName: "Northside Clinic",
		faxNumber: "+12125550199", createdAt: clinic, updatedAt: clinic,
	})
}

func seedID(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func (s *Sim) addContactLocked(c *contact) {
	s.contactSeq++
	c.seq = s.contactSeq
	s.contacts = append(s.contacts, c)
	s.contactByID[c.id] = c
}

var (
	dobPattern = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)
	faxPattern = regexp.MustCompile(`^\+[1-9]\d{6,14}$`)
)

// handleContactCreate stores a contact (endpoint 2). Its failures use the
// spec's creation failure shape, an object holding only data as a string.
func (s *Sim) handleContactCreate(w http.ResponseWriter, c *call) {
	obj, isObject, err := decodeObject(c.body)
	if err != nil {
		writeFailure(w, http.StatusBadRequest, msgMalformedJSON)
		return
	}
	fail := func(msg string) { httpjson.Write(w, http.StatusUnprocessableEntity, map[string]string{"data": msg}) }
	if !isObject {
		fail(msgContactNotObject)
		return
	}
	isOrg, p := obj.boolean("is_organization")
	if p == wrongType {
		fail("The is organization field must be true or false.")
		return
	}
	vals := map[string]string{}
	for _, name := range []string{"type", "first_name", "middle_name", "last_name", "suffix", "email", "fax_number", "dob", "gender"} {
		v, p := obj.str(name)
		if p == wrongType {
			fail(msgString(name))
			return
		}
		vals[name] = strings.TrimSpace(v)
	}
	switch {
	case !isOrg && vals["first_name"] == "" && vals["last_name"] == "":
		fail(msgNameRequired)
		return
	case vals["email"] != "" && !validEmail(vals["email"]):
		fail("The email must be a valid email address.")
		return
	case vals["fax_number"] != "" && !faxPattern.MatchString(vals["fax_number"]):
		fail("The fax number format is invalid.")
		return
	case vals["dob"] != "" && !validDate(vals["dob"]):
		fail("The dob does not match the format Y-m-d.")
		return
	}
	if vals["type"] == "" {
		vals["type"] = "individual"
	}
	now := s.now()
	ct := &contact{
		id: randomID(12), typ: vals["type"], isOrganization: isOrg,
		firstName: vals["first_name"], middleName: vals["middle_name"], lastName: vals["last_name"],
		suffix: vals["suffix"], email: vals["email"], faxNumber: vals["fax_number"], dob: vals["dob"],
		gender: strings.ToLower(vals["gender"]), createdAt: now, updatedAt: now,
	}
	s.mu.Lock()
	s.addContactLocked(ct)
	s.mu.Unlock()
	writeOK(w, msgContactCreated, nil)
}

func validEmail(e string) bool {
	at := strings.LastIndexByte(e, '@')
	return at > 0 && at < len(e)-1 && !strings.ContainsAny(e, " \t")
}

func validDate(d string) bool {
	if !dobPattern.MatchString(d) {
		return false
	}
	_, err := time.Parse("2006-01-02", d)
	return err == nil
}

// handleContactDetails returns one contact (endpoint 3).
func (s *Sim) handleContactDetails(w http.ResponseWriter, c *call) {
	obj, ok := jsonObject(w, c)
	if !ok {
		return
	}
	id, ok := requiredStr(w, obj, "id")
	if !ok {
		return
	}
	s.mu.Lock()
	ct, found := s.contactByID[id]
	var d contactDetails
	if found {
		d = ct.details()
	}
	s.mu.Unlock()
	if !found {
		writeFailure(w, http.StatusNotFound, msgContactNotFound)
		return
	}
	writeOK(w, msgContactDetails, d)
}

// listMeta tells a paging client where the next page starts. The upstream's
// paging response shape is not documented; meta is present only when there
// is a next page.
type listMeta struct {
	NextCursor string `json:"next_cursor"`
}

// handleContactList lists contacts (endpoint 4), paged by the ?limit= and
// ?cursor= query parameters the real API uses for lists. Without a limit it
// returns everything, which is what the documented empty-object request gets.
func (s *Sim) handleContactList(w http.ResponseWriter, c *call) {
	if _, ok := jsonObject(w, c); !ok {
		return
	}
	q := c.r.URL.Query()
	limit := 0
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil {
			writeFailure(w, http.StatusUnprocessableEntity, msgLimitInteger)
			return
		}
		if n < 1 {
			writeFailure(w, http.StatusUnprocessableEntity, msgLimitMin)
			return
		}
		limit = min(n, maxPage)
	}
	after := 0
	if v := q.Get("cursor"); v != "" {
		n, ok := decodeCursor(v)
		if !ok {
			writeFailure(w, http.StatusUnprocessableEntity, msgInvalidCursor)
			return
		}
		after = n
	}

	s.mu.Lock()
	items := []contactListItem{}
	var last *contact
	more := false
	for _, ct := range s.contacts {
		if ct.seq <= after {
			continue
		}
		if limit > 0 && len(items) == limit {
			more = true
			break
		}
		items = append(items, ct.listItem())
		last = ct
	}
	s.mu.Unlock()

	env := envelope{Status: 1, Message: msgContactsFetched, Data: items}
	if more {
		env.Meta = listMeta{NextCursor: encodeCursor(last.seq)}
	}
	httpjson.Write(w, http.StatusOK, env)
}

// Cursors are opaque to clients but simply name the last contact of a page,
// so a contact created between pages still shows up later.
func encodeCursor(seq int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("after:" + strconv.Itoa(seq)))
}

func decodeCursor(v string) (int, bool) {
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return 0, false
	}
	n, ok := strings.CutPrefix(string(b), "after:")
	if !ok {
		return 0, false
	}
	seq, err := strconv.Atoi(n)
	if err != nil || seq < 0 {
		return 0, false
	}
	return seq, true
}
