package faxsim

import (
	"encoding/base64"
	"net/http"
)

// Messages of the two undocumented fax endpoints the simulator carries.
const (
	msgFaxQueued   = "Fax queued successfully."
	msgFaxDeleted  = "Fax deleted successfully."
	msgFileDataB64 = "The file data must be a valid base64 string."
)

// faxJob is data of both fax endpoints.
type faxJob struct {
	JobID string `json:"job_id"`
}

// handleFaxSend accepts POST /v1/faxes/send: a JSON body carrying the document
// as a base64 PDF, often several MB. Decoding it all proves the gateway
// delivered every byte, not just the first buffer's worth.
func (s *Sim) handleFaxSend(w http.ResponseWriter, c *call) {
	obj, ok := jsonObject(w, c)
	if !ok {
		return
	}
	if _, ok := requiredStr(w, obj, "to_number"); !ok {
		return
	}
	data, ok := requiredStr(w, obj, "file_data")
	if !ok {
		return
	}
	if _, err := base64.StdEncoding.DecodeString(data); err != nil {
		writeFailure(w, http.StatusUnprocessableEntity, msgFileDataB64)
		return
	}
	writeOK(w, msgFaxQueued, faxJob{JobID: "job_" + randomID(9)})
}

// handleFaxDelete accepts DELETE /v1/faxes/delete with a JSON body naming the
// job. Any job id succeeds: the endpoint exists to prove that a DELETE body
// reaches the upstream, and the job echoed back shows that it did.
func (s *Sim) handleFaxDelete(w http.ResponseWriter, c *call) {
	obj, ok := jsonObject(w, c)
	if !ok {
		return
	}
	id, ok := requiredStr(w, obj, "job_id")
	if !ok {
		return
	}
	writeOK(w, msgFaxDeleted, faxJob{JobID: id})
}
