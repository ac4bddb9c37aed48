package cloudinit

import (
	"encoding/base64"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestNewConfig(t *testing.T) {
	meta := MetaData{InstanceID: "vm1.default", Hostname: "vm1"}
	b64 := base64.StdEncoding.EncodeToString
	tests := []struct {
		name    string
		kind    Kind
		src     Source
		meta    MetaData
		user    string
		network string
		bad     bool
	}{
		{name: "user data", kind: NoCloud, src: Source{UserData: "#cloud-config\n"}, meta: meta, user: "#cloud-config\n"},
		{name: "base64", kind: ConfigDrive, src: Source{UserDataBase64: b64([]byte("u")), NetworkDataBase64: b64([]byte("n"))}, meta: meta, user: "u", network: "n"},
		{name: "network only", kind: NoCloud, src: Source{NetworkData: "version: 2\n"}, meta: meta, network: "version: 2\n"},
		{name: "nothing", kind: NoCloud, meta: meta, bad: true},
		{name: "both user forms", kind: NoCloud, src: Source{UserData: "a", UserDataBase64: b64([]byte("a"))}, meta: meta, bad: true},
		{name: "both network forms", kind: NoCloud, src: Source{NetworkData: "a", NetworkDataBase64: b64([]byte("a"))}, meta: meta, bad: true},
		{name: "bad base64", kind: NoCloud, src: Source{UserDataBase64: "!!!"}, meta: meta, bad: true},
		{name: "too large", kind: NoCloud, src: Source{UserData: strings.Repeat("x", MaxDataBytes+1)}, meta: meta, bad: true},
		{name: "no instance id", kind: NoCloud, src: Source{UserData: "a"}, bad: true},
		{name: "yaml in instance id", kind: NoCloud, src: Source{UserData: "a"}, meta: MetaData{InstanceID: "x\nlocal-hostname: evil"}, bad: true},
		{name: "bad hostname", kind: NoCloud, src: Source{UserData: "a"}, meta: MetaData{InstanceID: "x", Hostname: "a b"}, bad: true},
		{name: "bad kind", kind: "Azure", src: Source{UserData: "a"}, meta: meta, bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewConfig(tt.kind, tt.src, tt.meta)
			if tt.bad {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("NewConfig = %+v, %v; want ErrInvalid", c, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(c.UserData) != tt.user || string(c.NetworkData) != tt.network {
				t.Errorf("user %q network %q, want %q %q", c.UserData, c.NetworkData, tt.user, tt.network)
			}
		})
	}
}

func TestFiles(t *testing.T) {
	meta := MetaData{InstanceID: "vm1.default", Hostname: "vm1", PublicKeys: map[string]string{"k": "ssh-ed25519 AAA"}}
	src := Source{UserData: "#cloud-config\n", NetworkData: "version: 2\n"}
	tests := []struct {
		kind  Kind
		label string
		want  map[string]string
	}{
		{NoCloud, "cidata", map[string]string{
			"user-data":      "#cloud-config\n",
			"network-config": "version: 2\n",
			"meta-data":      `{"instance-id":"vm1.default","local-hostname":"vm1","public-keys":{"k":"ssh-ed25519 AAA"}}` + "\n",
		}},
		{ConfigDrive, "config-2", map[string]string{
			"openstack/latest/user_data":         "#cloud-config\n",
			"openstack/latest/network_data.json": "version: 2\n",
			"openstack/latest/meta_data.json":    `{"hostname":"vm1","instance_id":"vm1.default","public_keys":{"k":"ssh-ed25519 AAA"},"uuid":"vm1.default"}`,
		}},
	}
	for _, tt := range tests {
		c, err := NewConfig(tt.kind, src, meta)
		if err != nil {
			t.Fatal(err)
		}
		files, err := c.Files()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for k, v := range files {
			got[k] = string(v)
		}
		if !reflect.DeepEqual(got, tt.want) || c.Label() != tt.label {
			t.Errorf("%s: label %s files %q\nwant label %s files %q", tt.kind, c.Label(), got, tt.label, tt.want)
		}
	}
}
