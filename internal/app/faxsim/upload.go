package faxsim

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
)

// Messages of the patient document upload.
const (
	msgDocUploaded       = "Patient document uploaded successfully."
	msgNotMultipart      = "The request must be multipart/form-data."
	msgMalformedMultpart = "The request body is not valid multipart/form-data."
)

// uploadedDoc is data of a successful upload; the spec leaves it unvalidated,
// so it says what a client would want to check: what was stored, how big.
type uploadedDoc struct {
	ID       string `json:"id"`
	FileName string `json:"file_name"`
	Size     int    `json:"size"`
}

// handleUploadPatientDoc accepts a multipart form with the text parts
// file_name and file_data (endpoint 5). A part sent as a file is read the
// same way, since clients differ in how they build the form.
func (s *Sim) handleUploadPatientDoc(w http.ResponseWriter, c *call) {
	mt, params, err := mime.ParseMediaType(c.r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		writeFailure(w, http.StatusBadRequest, msgNotMultipart)
		return
	}
	form, err := readForm(c.body, params["boundary"])
	if err != nil {
		writeFailure(w, http.StatusBadRequest, msgMalformedMultpart)
		return
	}
	name, data := form["file_name"], form["file_data"]
	switch {
	case strings.TrimSpace(name) == "":
		writeFailure(w, http.StatusUnprocessableEntity, msgRequired("file_name"))
		return
	case strings.TrimSpace(data) == "":
		writeFailure(w, http.StatusUnprocessableEntity, msgRequired("file_data"))
		return
	}
	writeOK(w, msgDocUploaded, uploadedDoc{ID: randomID(9), FileName: name, Size: len(data)})
}

// readForm returns every named part of a multipart body; a repeated name
// keeps its last value, as the upstream's framework does.
func readForm(body []byte, boundary string) (map[string]string, error) {
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	form := map[string]string{}
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return form, nil
		}
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(p)
		if err != nil {
			return nil, err
		}
		if n := p.FormName(); n != "" {
			form[n] = string(b)
		}
	}
}
