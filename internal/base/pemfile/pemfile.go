// Package pemfile writes DER data as a PEM file readable only by its owner
// (certificates and keys the demo and the tests generate).
package pemfile

import (
	"encoding/pem"
	"os"
)

// Write writes der as one PEM block of type typ ("CERTIFICATE", "EC
// PRIVATE KEY") to path, with mode 0600.
func Write(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
