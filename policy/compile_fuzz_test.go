package policy

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/config"
)

// FuzzCompile holds the promise of issue 8: validation lives in config
// alone, so every file that config.Parse accepts (and faxgate check passes)
// compiles. A rule that policy still enforced on its own would show up here
// as a file that parses but does not compile.
func FuzzCompile(f *testing.F) {
	seeds, _ := filepath.Glob("../internal/config/testdata/*.yaml")
	seeds = append(seeds, "../config.example.yaml")
	for _, name := range seeds {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	const base = "upstream: {base_url: \"https://api.example.com\", api_key_env: K}\n"
	// Valid files near the rules that moved out of policy.
	f.Add([]byte(base + "routes:\n  extra:\n    - {name: numbers.peek, method: GET, path: /v1/numbers/delete}\npolicy:\n  sensitive: [numbers.delete, numbers.peek]\n"))
	f.Add([]byte(base + "callers:\n  list:\n    - {name: a, cidrs: [\"::ffff:10.0.0.0/104\"], allow: [\"*\"]}\n    - {name: b, cidrs: [\"10.1.0.0/16\"]}\n"))
	f.Add([]byte(base + "rate_limit: {backend: redis}\ncallers:\n  trusted_proxies: [\"::ffff:127.0.0.1/128\"]\n  unidentified: g\n  list: [{name: g, header_values: [x]}]\n"))
	f.Add([]byte(base + "routes:\n  extra:\n    - {name: faxes.get, method: GET, path: \"/v1/faxes/{id}\"}\n    - {name: faxes.del, method: DELETE, path: \"/v1/Faxes/{faxId}\"}\n"))
	// Compile never contacts Redis; the client only has to exist.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	getenv := func(string) (string, bool) { return "x", true }
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Parse(data, getenv)
		if err != nil {
			return
		}
		if _, err := Compile(cfg.RuleSections(), time.Now, WithRedis(client, nil, zap.NewNop())); err != nil {
			t.Fatalf("config.Parse accepted a file that policy.Compile refuses: %v\n%s", err, data)
		}
	})
}
