package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
)

// CandidateSections are the sections a shadow candidate brings
// (docs/callers-and-policy.md#trying-a-change-in-shadow-mode); the rest of
// its file is the live file's business.
var CandidateSections = []string{"callers", "policy", "routes", "rate_limit", "upstream_budget"}

// LoadCandidate loads live's shadow candidate, shadow.config_file, as the
// live file is loaded where the candidate is: with LoadAndCheck when
// checkEnv (faxgate check, serve's start), with Load on a reload, so that
// the candidate is never held to more than the live file. It checks what
// the candidate needs of the live configuration: a candidate whose limits are shared through Redis
// uses the live file's Redis connection. Every problem names the file,
// then its YAML path. A relative path is read from the live file's
// directory (livePath). It returns nil and no error when live has no
// candidate.
func LoadCandidate(live *Config, livePath string, getenv func(string) (string, bool), checkEnv bool) (*Config, error) {
	name := live.Shadow.ConfigFile
	if name == "" {
		return nil, nil
	}
	if !filepath.IsAbs(name) && livePath != "" {
		name = filepath.Join(filepath.Dir(livePath), name)
	}
	load := Load
	if checkEnv {
		load = LoadAndCheck
	}
	c, err := load(name, getenv)
	var ps Problems
	switch {
	case errors.As(err, &ps):
		out := make(Problems, len(ps))
		for i, p := range ps {
			out[i] = Problem{Path: name, Message: p.String()}
		}
		return nil, out
	case err != nil:
		return nil, Problems{{Path: "shadow.config_file", Message: fmt.Sprintf("cannot read the candidate %q: %v", name, errors.Unwrap(err))}}
	}
	if c.Shadow.ConfigFile != "" {
		// Only the live file's candidate is read: a key that would be
		// ignored is refused instead.
		return nil, Problems{{Path: name, Message: "shadow.config_file: a candidate has no candidate of its own; remove the key from the candidate"}}
	}
	if c.RateLimit.Backend == "redis" && !live.UsesRedis() {
		return nil, Problems{{Path: name, Message: `rate_limit.backend: "redis" in a candidate needs the live configuration to use Redis: the candidate shares its connection`}}
	}
	return c, nil
}

// CandidateDiffers returns the candidate sections in which c and o differ,
// in CandidateSections' order.
func CandidateDiffers(c, o *Config) []string {
	var out []string
	cv, ov := reflect.ValueOf(*c), reflect.ValueOf(*o)
	for i := range cv.NumField() {
		name := yamlKey(cv.Type().Field(i))
		for _, s := range CandidateSections {
			if s == name && !reflect.DeepEqual(cv.Field(i).Interface(), ov.Field(i).Interface()) {
				out = append(out, name)
			}
		}
	}
	sortBy(out, CandidateSections)
	return out
}

func yamlKey(f reflect.StructField) string {
	tag := f.Tag.Get("yaml")
	for i := 0; i < len(tag); i++ {
		if tag[i] == ',' {
			return tag[:i]
		}
	}
	return tag
}

// sortBy orders names as they come in order.
func sortBy(names, order []string) {
	rank := map[string]int{}
	for i, n := range order {
		rank[n] = i
	}
	for i := 1; i < len(names); i++ {
		for j := i; j > 0 && rank[names[j]] < rank[names[j-1]]; j-- {
			names[j], names[j-1] = names[j-1], names[j]
		}
	}
}
