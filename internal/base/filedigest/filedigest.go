// Package filedigest hashes a file's content, so a poller can tell that a
// file changed without keeping (or ever logging) the content itself. The key
// file watcher and the config reloader both use it.
package filedigest

import (
	"crypto/sha256"
	"os"
)

// Digest is the SHA-256 of a file's content.
type Digest [sha256.Size]byte

// Of returns the digest of the file at path. Polling the content rather than
// the modification time survives Kubernetes' symlink swaps of mounted
// Secrets and ConfigMaps, which keep old timestamps.
func Of(path string) (Digest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Digest{}, err
	}
	return sha256.Sum256(b), nil
}
