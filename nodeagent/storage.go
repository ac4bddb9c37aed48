package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmimetrics"
	"github.com/vmlet/vmlet/storage"
	"github.com/vmlet/vmlet/storage/oci"
	"github.com/vmlet/vmlet/storage/qemuimg"
)

// ErrBadFlag marks a malformed storage flag value.
var ErrBadFlag = errors.New("bad flag value")

// ParseImageSource parses `--image REF=SOURCE`: VMIs that name image REF get it pulled from
// SOURCE instead, an image reference such as "oci:/abs/dir:tag" (an OCI layout on disk) or a
// mirror "host:port/repo:tag".
func ParseImageSource(s string) (ref, source string, err error) {
	ref, source, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("parse image source %q: %w: want REF=SOURCE (e.g. vmlet.dev/guest:1=oci:/dir:1)", s, ErrBadFlag)
	}
	if strings.HasPrefix(source, "/") { // the old --image REF=DIR (an unpacked folder)
		return "", "", fmt.Errorf("parse image source %q: %w: %s is a path; an OCI layout is oci:%s:TAG (hack/guestimage writes one)", s, ErrBadFlag, source, source)
	}
	for _, r := range []string{ref, source} {
		if err := oci.CheckReference(r); err != nil {
			return "", "", fmt.Errorf("parse image source %q: %w: %w", s, ErrBadFlag, err)
		}
	}
	return ref, source, nil
}

// ParseClaim parses `--claim NAME=PATH`: the persistentVolumeClaim (or dataVolume) NAME, in any
// namespace ("NAMESPACE/NAME": in that one), is PATH on this machine: a folder holding disk.img
// (KubeVirt's filesystem-mode PVC) or a block device. PATH must exist.
func ParseClaim(s string) (name string, c storage.Claim, err error) {
	name, p, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return "", c, fmt.Errorf("parse claim %q: %w: want NAME=PATH", s, ErrBadFlag)
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return "", c, fmt.Errorf("parse claim %q: %w: %s is not an absolute clean path", s, ErrBadFlag, p)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", c, fmt.Errorf("parse claim %q: %w", s, err)
	}
	switch {
	case fi.IsDir():
		c = storage.Claim{Path: p, Mode: storage.Filesystem}
	case fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0:
		c = storage.Claim{Path: p, Mode: storage.Block}
	default:
		return "", c, fmt.Errorf("parse claim %q: %w: %s is neither a folder nor a block device", s, ErrBadFlag, p)
	}
	return name, c, nil
}

// StorageConfig is the node's storage: where images are cached, where each VMI's disks are
// made, and what hostDisks, claims and image references mean on this node.
type StorageConfig struct {
	// ImageCacheDir is the node's OCI image cache, shared by all VMIs.
	ImageCacheDir string
	// VolumeRoot holds one storage folder per VMI (overlays, empty disks, cloud-init ISOs),
	// removed with the VMI.
	VolumeRoot string
	// HostDiskRoot is the folder hostDisk paths must be beneath; empty refuses hostDisks.
	HostDiskRoot string
	// Claims are the persistentVolumeClaims (and dataVolumes) this node provides, by "name" or
	// "namespace/name" (see ParseClaim).
	Claims map[string]storage.Claim
	// ImageSources maps image references in VMIs to where they are pulled from (see
	// ParseImageSource).
	ImageSources map[string]string
	// PullBackOff is the wait after a VMI's first failed pull of an image, doubling with each
	// further failure up to PullBackOffMax; 0 means the kubelet's 10 s and 5 min.
	PullBackOff, PullBackOffMax time.Duration
	// Owner is the launchers' user, who is handed each VMI's files; nil: root.
	Owner *storage.Owner
	// SELinuxRelabel says when the agent labels each VMI's files for its launcher
	// (--selinux-relabel; "" is auto: where SELinux is enabled).
	SELinuxRelabel controllers.SELinuxRelabel
	// SELinuxLauncherType is the process type of the launchers the agent starts itself (the
	// process runtime; --selinux-launcher-type, "" is container_t).
	SELinuxLauncherType string
}

// Defaults fills in the storage folders under stateDir where they are empty.
func (cfg *StorageConfig) Defaults(stateDir string) {
	if cfg.ImageCacheDir == "" {
		cfg.ImageCacheDir = filepath.Join(stateDir, "images")
	}
	if cfg.VolumeRoot == "" {
		cfg.VolumeRoot = filepath.Join(stateDir, "volumes")
	}
}

// openStorage opens the image cache and makes the volume root.
func openStorage(cfg StorageConfig) (controllers.NodeStorage, error) {
	// Launchers' users pass through to their own VMI's folder (0700 each); nobody lists it.
	if err := os.MkdirAll(cfg.VolumeRoot, 0o711); err != nil {
		return controllers.NodeStorage{}, fmt.Errorf("make volume root: %w", err)
	}
	if err := os.Chmod(cfg.VolumeRoot, 0o711); err != nil {
		return controllers.NodeStorage{}, fmt.Errorf("make volume root: %w", err)
	}
	cache, err := oci.Open(oci.Options{Dir: cfg.ImageCacheDir, QemuImg: qemuimg.Tool{}})
	if err != nil {
		return controllers.NodeStorage{}, fmt.Errorf("open image cache: %w", err)
	}
	if o := cfg.Owner; o != nil {
		// QEMU, as the launchers' user, opens base images and kernels in the cache and its
		// VMI's folder in the volume root: say so now rather than at every VMI's start.
		u := storage.User{UID: uint32(o.UID), GID: uint32(o.GID)}
		for _, d := range []string{cfg.ImageCacheDir, cfg.VolumeRoot} {
			if err := storage.CheckSearchable(d, u, os.Stat); err != nil {
				return controllers.NodeStorage{}, fmt.Errorf("open storage: %w (make the folders above it o+x, or use --launcher-uid 0)", err)
			}
		}
	}
	return controllers.NodeStorage{Host: &storage.Host{Images: cache, QemuImg: qemuimg.Tool{}, OnPull: vmimetrics.ObserveImagePull}, Root: cfg.VolumeRoot,
		PullBackOff: cfg.PullBackOff, PullBackOffMax: cfg.PullBackOffMax}, nil
}

// removeOrphanVolumes removes the storage folders of VMIs that no longer exist (deleted while
// no agent ran, e.g. their finalizer removed by hand). It runs before the agent starts, so no
// reconcile makes a folder meanwhile.
func removeOrphanVolumes(ctx context.Context, c client.Reader, root string) ([]string, error) {
	var l vmletv1.VirtualMachineInstanceList
	if err := c.List(ctx, &l); err != nil {
		return nil, fmt.Errorf("list VMIs: %w", err)
	}
	keep := map[string]bool{}
	for _, v := range l.Items {
		keep[string(v.UID)] = true
	}
	return cleanupVolumes(root, keep)
}

// cleanupVolumes removes every VMI folder in root whose name is not in keep (storage.Cleanup:
// only folders storage made) and returns what it removed.
func cleanupVolumes(root string, keep map[string]bool) ([]string, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list volume root: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || keep[e.Name()] {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if err := storage.Cleanup(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, dir)
	}
	return removed, errors.Join(errs...)
}

func (cfg *StorageConfig) env() translate.StorageEnv {
	return translate.StorageEnv{HostDiskRoot: cfg.HostDiskRoot, Claims: cfg.Claims, ImageSources: cfg.ImageSources, Owner: cfg.Owner}
}
