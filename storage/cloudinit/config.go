package cloudinit

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
)

// Kind is the cloud-init datasource a disk is built for.
type Kind string

// Kinds.
const (
	NoCloud     Kind = "NoCloud"
	ConfigDrive Kind = "ConfigDrive"
)

// Volume labels cloud-init looks for.
const (
	LabelNoCloud     = "cidata"
	LabelConfigDrive = "config-2"
)

// MaxDataBytes bounds user data and network data (each, decoded).
const MaxDataBytes = 16 << 20

// Sentinels.
var (
	ErrInvalid = errors.New("invalid cloud-init source")
)

// Source is a cloudInitNoCloud or cloudInitConfigDrive volume source with secret references
// already resolved into UserData / NetworkData by the caller. Plain and base64 forms of the same
// item are mutually exclusive.
type Source struct {
	UserData          string
	UserDataBase64    string
	NetworkData       string
	NetworkDataBase64 string
}

// MetaData is the instance identity written next to the user data.
type MetaData struct {
	// InstanceID changes when cloud-init should run its per-instance modules again
	// (KubeVirt uses "<vmi name>.<namespace>"). Required.
	InstanceID string
	// Hostname is the guest's local hostname; optional.
	Hostname string
	// UUID is ConfigDrive's "uuid" (cloud-init requires it there); empty means InstanceID.
	UUID string
	// PublicKeys are SSH keys by name (ConfigDrive public_keys, NoCloud public-keys).
	PublicKeys map[string]string
}

// Config is the validated content of one cloud-init disk.
type Config struct {
	Kind        Kind
	UserData    []byte // nil when absent
	NetworkData []byte // nil when absent
	Meta        MetaData
}

var metaRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)

// NewConfig validates src and meta and decodes the base64 forms.
func NewConfig(kind Kind, src Source, meta MetaData) (*Config, error) {
	if kind != NoCloud && kind != ConfigDrive {
		return nil, fmt.Errorf("build cloud-init config: kind %q: %w", kind, ErrInvalid)
	}
	c := &Config{Kind: kind, Meta: meta}
	var err error
	if c.UserData, err = pick("userData", src.UserData, src.UserDataBase64); err != nil {
		return nil, err
	}
	if c.NetworkData, err = pick("networkData", src.NetworkData, src.NetworkDataBase64); err != nil {
		return nil, err
	}
	if c.UserData == nil && c.NetworkData == nil {
		return nil, fmt.Errorf("build cloud-init config: neither user data nor network data: %w", ErrInvalid)
	}
	if !metaRe.MatchString(meta.InstanceID) {
		return nil, fmt.Errorf("build cloud-init config: instance id %q must be 1-253 of [A-Za-z0-9._-]: %w", meta.InstanceID, ErrInvalid)
	}
	if meta.Hostname != "" && !metaRe.MatchString(meta.Hostname) {
		return nil, fmt.Errorf("build cloud-init config: hostname %q must be 1-253 of [A-Za-z0-9._-]: %w", meta.Hostname, ErrInvalid)
	}
	return c, nil
}

func pick(field, plain, b64 string) ([]byte, error) {
	switch {
	case plain != "" && b64 != "":
		return nil, fmt.Errorf("build cloud-init config: %s and %sBase64 are exclusive: %w", field, field, ErrInvalid)
	case plain != "":
		if len(plain) > MaxDataBytes {
			return nil, fmt.Errorf("build cloud-init config: %s is over %d bytes: %w", field, MaxDataBytes, ErrInvalid)
		}
		return []byte(plain), nil
	case b64 != "":
		if base64.StdEncoding.DecodedLen(len(b64)) > MaxDataBytes+3 {
			return nil, fmt.Errorf("build cloud-init config: %sBase64 is over %d bytes: %w", field, MaxDataBytes, ErrInvalid)
		}
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("build cloud-init config: decode %sBase64: %w: %w", field, ErrInvalid, err)
		}
		return b, nil
	}
	return nil, nil
}

// Label is the ISO volume label for the config's kind.
func (c *Config) Label() string {
	if c.Kind == ConfigDrive {
		return LabelConfigDrive
	}
	return LabelNoCloud
}

// Files is the disk's file tree: path (slash-separated, relative to the root) → content.
func (c *Config) Files() (map[string][]byte, error) {
	files := map[string][]byte{}
	if c.Kind == ConfigDrive {
		meta := map[string]any{"instance_id": c.Meta.InstanceID, "uuid": c.Meta.UUID}
		if c.Meta.UUID == "" {
			meta["uuid"] = c.Meta.InstanceID
		}
		if c.Meta.Hostname != "" {
			meta["hostname"] = c.Meta.Hostname
		}
		if len(c.Meta.PublicKeys) > 0 {
			meta["public_keys"] = c.Meta.PublicKeys
		}
		b, err := json.Marshal(meta)
		if err != nil {
			return nil, fmt.Errorf("encode meta_data.json: %w", err)
		}
		files["openstack/latest/meta_data.json"] = b
		if c.UserData != nil {
			files["openstack/latest/user_data"] = c.UserData
		}
		if c.NetworkData != nil {
			files["openstack/latest/network_data.json"] = c.NetworkData
		}
		return files, nil
	}
	// meta-data is YAML; JSON is YAML and needs no quoting rules of its own.
	meta := map[string]any{"instance-id": c.Meta.InstanceID}
	if c.Meta.Hostname != "" {
		meta["local-hostname"] = c.Meta.Hostname
	}
	if len(c.Meta.PublicKeys) > 0 {
		meta["public-keys"] = c.Meta.PublicKeys
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("encode meta-data: %w", err)
	}
	files["meta-data"] = append(b, '\n')
	// cloud-init's NoCloud reads user-data whether or not it is given; an empty one is valid.
	files["user-data"] = c.UserData
	if files["user-data"] == nil {
		files["user-data"] = []byte{}
	}
	if c.NetworkData != nil {
		files["network-config"] = c.NetworkData
	}
	return files, nil
}
