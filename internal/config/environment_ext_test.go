package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/tokencache"
)

// TestKeyFileAgreesWithTokencache keeps CheckEnvironment's view of the API
// key file the token manager's: whatever tokencache.FileKey cannot use,
// check refuses, and the other way round.
func TestKeyFileAgreesWithTokencache(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, path := range map[string]string{
		"key":            write("key", "sk_test_abc"),
		"key in blanks":  write("padded", "\n  sk_test_abc \n"),
		"empty":          write("empty", ""),
		"blank":          write("blank", " \r\n\t"),
		"missing":        filepath.Join(dir, "missing"),
		"directory":      dir,
		"below a file":   filepath.Join(dir, "key", "x"),
		"one byte":       write("one", "k"),
		"only a newline": write("nl", "\n"),
	} {
		t.Run(name, func(t *testing.T) {
			c := config.Default()
			c.Upstream.APIKeyFile = path
			checkOK := len(config.CheckEnvironment(&c, nil)) == 0
			_, err := tokencache.FileKey(path)()
			if checkOK != (err == nil) {
				t.Errorf("CheckEnvironment ok = %v, tokencache.FileKey error = %v", checkOK, err)
			}
		})
	}
}
