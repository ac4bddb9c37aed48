package oci

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
)

// ErrBadPullSecret marks a pull secret's content that cannot be parsed. Its messages never hold
// the content.
var ErrBadPullSecret = errors.New("invalid pull secret")

// Credential is one registry's login, as a docker config holds it.
type Credential struct {
	Username      string
	Password      string
	IdentityToken string
}

// String never shows the secret parts.
func (c Credential) String() string {
	return fmt.Sprintf("{user %q, credentials redacted}", c.Username)
}

// GoString never shows the secret parts.
func (c Credential) GoString() string { return c.String() }

// Credentials are the logins of a pull secret by registry key ("host", "host:port",
// "host/path", "https://host/path"). They are an authn.Keychain matching the image's
// repository as the kubelet does: the longest key whose host equals the image's registry and
// whose path is a prefix of the repository's path (on path-segment boundaries).
type Credentials map[string]Credential

// String never shows the secret parts.
func (c Credentials) String() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return fmt.Sprintf("credentials for %s (redacted)", strings.Join(keys, ", "))
}

// GoString never shows the secret parts.
func (c Credentials) GoString() string { return c.String() }

// MarshalJSON never writes the secret parts.
func (c Credentials) MarshalJSON() ([]byte, error) { return json.Marshal(c.String()) }

// dockerEntry is one entry of a docker config's auths.
type dockerEntry struct {
	Username      string `json:"username"`
	Password      string `json:"password"`
	Auth          string `json:"auth"`
	IdentityToken string `json:"identitytoken"`
}

// ParseDockerConfigJSON parses a kubernetes.io/dockerconfigjson Secret's .dockerconfigjson:
// {"auths": {"<registry>": {"username", "password", "auth", "identitytoken"}}}.
func ParseDockerConfigJSON(b []byte) (Credentials, error) {
	var cfg struct {
		Auths map[string]dockerEntry `json:"auths"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("%w: .dockerconfigjson is not a docker config JSON (%s)", ErrBadPullSecret, jsonWhy(err))
	}
	if cfg.Auths == nil {
		return nil, fmt.Errorf("%w: .dockerconfigjson has no \"auths\"", ErrBadPullSecret)
	}
	return credentials(cfg.Auths)
}

// ParseDockerCfg parses a kubernetes.io/dockercfg Secret's .dockercfg: the legacy
// {"<registry>": {...}} map.
func ParseDockerCfg(b []byte) (Credentials, error) {
	var auths map[string]dockerEntry
	if err := json.Unmarshal(b, &auths); err != nil {
		return nil, fmt.Errorf("%w: .dockercfg is not a docker config (%s)", ErrBadPullSecret, jsonWhy(err))
	}
	return credentials(auths)
}

// jsonWhy describes a JSON error without quoting the input.
func jsonWhy(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("%s where %s belongs at byte %d", te.Value, te.Type, te.Offset)
	}
	return "unreadable"
}

func credentials(auths map[string]dockerEntry) (Credentials, error) {
	out := Credentials{}
	for key, e := range auths {
		if key == "" {
			return nil, fmt.Errorf("%w: an empty registry key", ErrBadPullSecret)
		}
		c := Credential{Username: e.Username, Password: e.Password, IdentityToken: e.IdentityToken}
		if e.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(e.Auth)
			if err != nil {
				return nil, fmt.Errorf("%w: registry %q: auth is not base64", ErrBadPullSecret, key)
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok {
				return nil, fmt.Errorf("%w: registry %q: auth is not user:password", ErrBadPullSecret, key)
			}
			c.Username, c.Password = user, pass
		}
		out[key] = c
	}
	return out, nil
}

// Lookup finds the credential for a repository "host[:port]/path" as the kubelet matches
// docker config keys: the key's scheme is ignored, its host must equal the repository's, and
// its path must be a prefix of the repository's path (whole segments); the longest path wins,
// the lexically first key among equals.
func (c Credentials) Lookup(registry, repository string) (Credential, bool) {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	best, bestLen, found := Credential{}, -1, false
	for _, key := range keys {
		host, path := splitKey(key)
		if !strings.EqualFold(host, registry) && (!isDockerHub(host) || !isDockerHub(registry)) {
			continue
		}
		if path != "" && repository != path && !strings.HasPrefix(repository, path+"/") {
			continue
		}
		if len(path) > bestLen {
			best, bestLen, found = c[key], len(path), true
		}
	}
	return best, found
}

// splitKey turns a docker config key into host[:port] and path (without slashes at the ends).
// A leading /v1/ or /v2/ is the registry API's, not a repository path (as the docker client
// and the kubelet read "https://index.docker.io/v1/").
func splitKey(key string) (host, path string) {
	host, path, _ = strings.Cut(key, "/")
	if strings.Contains(key, "://") {
		if u, err := url.Parse(key); err == nil {
			host, path = u.Host, u.Path
		}
	}
	path = "/" + strings.TrimPrefix(path, "/")
	for _, api := range []string{"/v1/", "/v2/"} {
		if strings.HasPrefix(path, api) || path+"/" == api {
			path = strings.TrimPrefix(path, api[:3])
		}
	}
	return host, strings.Trim(path, "/")
}

func isDockerHub(host string) bool {
	switch strings.ToLower(host) {
	case "index.docker.io", "docker.io", "registry-1.docker.io":
		return true
	}
	return false
}

// Resolve implements authn.Keychain: anonymous when no key matches.
func (c Credentials) Resolve(r authn.Resource) (authn.Authenticator, error) {
	repo := ""
	if rr, ok := r.(interface{ RepositoryStr() string }); ok {
		repo = rr.RepositoryStr()
	}
	cred, ok := c.Lookup(r.RegistryStr(), repo)
	if !ok {
		return authn.Anonymous, nil
	}
	return authn.FromConfig(authn.AuthConfig{Username: cred.Username, Password: cred.Password, IdentityToken: cred.IdentityToken}), nil
}

var _ authn.Keychain = Credentials{}
