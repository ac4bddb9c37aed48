package oci

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/storage/storagetest"
)

// TestParsePullSecret: both Secret formats, the base64 auth field (which wins over
// username/password), and content that cannot be parsed, whose error never quotes it.
func TestParsePullSecret(t *testing.T) {
	for _, tc := range []struct {
		name   string
		parse  func([]byte) (Credentials, error)
		in     string
		want   Credentials
		errSub string
	}{
		{"dockerconfigjson", ParseDockerConfigJSON,
			`{"auths":{"reg.example:5000":{"username":"u","password":"p"}}}`,
			Credentials{"reg.example:5000": {Username: "u", Password: "p"}}, ""},
		{"auth field", ParseDockerConfigJSON,
			`{"auths":{"https://reg.example/v1/":{"auth":"dXNlcjpwYTpzcw==","username":"ignored"}}}`,
			Credentials{"https://reg.example/v1/": {Username: "user", Password: "pa:ss"}}, ""},
		{"identity token", ParseDockerConfigJSON,
			`{"auths":{"reg.example":{"identitytoken":"tok"}}}`,
			Credentials{"reg.example": {IdentityToken: "tok"}}, ""},
		{"dockercfg", ParseDockerCfg,
			`{"reg.example":{"auth":"YTpi"},"other.example/team":{"username":"x","password":"y"}}`,
			Credentials{"reg.example": {Username: "a", Password: "b"}, "other.example/team": {Username: "x", Password: "y"}}, ""},
		{"bad json", ParseDockerConfigJSON, `{"auths":{"reg":{"password":"hunter2"`, nil, "not a docker config JSON"},
		{"wrong shape", ParseDockerConfigJSON, `{"auths":["hunter2"]}`, nil, "not a docker config JSON"},
		{"no auths", ParseDockerConfigJSON, `{"reg.example":{"auth":"YTpi"}}`, nil, `no "auths"`},
		{"auth not base64", ParseDockerConfigJSON, `{"auths":{"reg":{"auth":"hunter2!"}}}`, nil, "auth is not base64"},
		{"auth without colon", ParseDockerCfg, `{"reg":{"auth":"aHVudGVyMg=="}}`, nil, "auth is not user:password"},
		{"dockercfg bad json", ParseDockerCfg, `hunter2`, nil, "not a docker config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.parse([]byte(tc.in))
			if tc.errSub != "" {
				if !errors.Is(err, ErrBadPullSecret) || !strings.Contains(err.Error(), tc.errSub) {
					t.Fatalf("err = %v, want ErrBadPullSecret containing %q", err, tc.errSub)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("error quotes the secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(len(got)) != fmt.Sprint(len(tc.want)) {
				t.Fatalf("got %d entries, want %d", len(got), len(tc.want))
			}
			for k, w := range tc.want {
				if got[k] != w {
					t.Errorf("%s: got %+v, want %+v", k, got[k].Username, w.Username)
				}
			}
		})
	}
}

// TestCredentialsLookup matches registry keys as the kubelet does.
func TestCredentialsLookup(t *testing.T) {
	c := Credentials{
		"reg.example":                     {Username: "host"},
		"https://reg.example/team":        {Username: "team"},
		"reg.example/team/project":        {Username: "project"},
		"127.0.0.1:5000":                  {Username: "local"},
		"https://index.docker.io/v1/":     {Username: "hub"},
		"other.example/only/this/repo/xx": {Username: "deep"},
	}
	for _, tc := range []struct{ registry, repo, want string }{
		{"reg.example", "app", "host"},
		{"reg.example", "team/app", "team"},
		{"reg.example", "teamx/app", "host"},
		{"reg.example", "team/project/app", "project"},
		{"REG.example", "team/project", "project"},
		{"127.0.0.1:5000", "vm/disk", "local"},
		{"127.0.0.1:5001", "vm/disk", ""},
		{"index.docker.io", "library/busybox", "hub"},
		{"other.example", "only/this/repo", ""},
		{"unknown.example", "app", ""},
	} {
		got, ok := c.Lookup(tc.registry, tc.repo)
		if got.Username != tc.want || ok != (tc.want != "") {
			t.Errorf("Lookup(%s, %s) = %q, %v; want %q", tc.registry, tc.repo, got.Username, ok, tc.want)
		}
	}
	if s := fmt.Sprintf("%v %+v %#v", c, c["reg.example"], c); strings.Contains(s, "Password") || !strings.Contains(s, "redacted") {
		t.Errorf("formatting shows secrets or does not redact: %s", s)
	}
}

// TestPullWithCredentials: a registry asking for a login refuses an anonymous pull and wrong
// credentials (ErrImagePull wrapping ErrUnauthorized, messages saying which), and serves the
// image with the right ones.
func TestPullWithCredentials(t *testing.T) {
	reg := storagetest.StartRegistry(t)
	reg.RequireAuth("vmlet", "s3cret-pass")
	ref, digest := pushDisk(t, reg, "private/disk:v1", "1M")
	c := newCache(t)

	_, err := c.Pull(ctxT(t), ref, PullIfNotPresent)
	wantImageErr(t, err, ReasonErrImagePull, ErrUnauthorized)
	if !strings.Contains(err.Error(), "none were given") {
		t.Errorf("anonymous pull: %v", err)
	}
	_, err = c.PullWith(ctxT(t), ref, PullIfNotPresent, Credentials{reg.Host: {Username: "vmlet", Password: "wrong"}})
	wantImageErr(t, err, ReasonErrImagePull, ErrUnauthorized)
	if !strings.Contains(err.Error(), "refused the image pull secret's credentials") || strings.Contains(err.Error(), "wrong") {
		t.Errorf("wrong credentials: %v", err)
	}
	// A secret for another registry is not sent here.
	_, err = c.PullWith(ctxT(t), ref, PullIfNotPresent, Credentials{"elsewhere.example": {Username: "vmlet", Password: "s3cret-pass"}})
	wantImageErr(t, err, ReasonErrImagePull, ErrUnauthorized)
	refused := reg.Refused()
	img, err := c.PullWith(ctxT(t), ref, PullIfNotPresent, Credentials{"http://" + reg.Host + "/private": {Username: "vmlet", Password: "s3cret-pass"}})
	if err != nil {
		t.Fatal(err)
	}
	if img.Digest != digest {
		t.Errorf("digest %s, want %s", img.Digest, digest)
	}
	t.Logf("401 answers: %d before the good login, %d after", refused, reg.Refused())
}
