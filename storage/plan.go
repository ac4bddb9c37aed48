package storage

import (
	"fmt"
	"path/filepath"

	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage/cloudinit"
	"github.com/vmlet/vmlet/storage/oci"
)

// ActionKind is what an Action does.
type ActionKind string

// Action kinds, in the order Plan emits them: pulls first, then one action per volume in
// volume order, then the kernel link.
const (
	ActPull       ActionKind = "pull"           // Image, PullPolicy
	ActOverlay    ActionKind = "create-overlay" // Path over Image's disk (ImagePath) or over Backing
	ActEmpty      ActionKind = "create-empty"   // Path, SizeBytes
	ActISO        ActionKind = "build-iso"      // Path, CloudInit
	ActHostPath   ActionKind = "use-host-path"  // Path beneath Root; Create with SizeBytes; Block
	ActLinkKernel ActionKind = "link-kernel"    // Path ← Image's ImagePath, Initrd ← InitrdImagePath
)

// Action is one step of a plan. Only the fields its Kind names are set.
type Action struct {
	Kind   ActionKind
	Volume string // "" for kernel boot actions
	Path   string // the file the action makes (in VMDir) or uses (host path, claim)

	Image      string         // pull, containerDisk overlay, kernel link
	PullPolicy oci.PullPolicy // pull
	// Credentials are the pull secret's logins (pull; nil: anonymous). They print redacted.
	Credentials oci.Credentials
	ImagePath   string // containerDisk disk path ("" = the /disk/ file), kernel path

	Initrd          string // link-kernel: where the initrd goes ("" = none)
	InitrdImagePath string // link-kernel: the initrd's path in the image

	Backing       string          // overlay over a claim image (ephemeral)
	BackingRoot   string          // the folder Backing must stay beneath ("" for block devices)
	BackingFormat qemu.DiskFormat // of Backing

	Root      string // use-host-path: Path must resolve beneath Root ("" for block devices)
	Create    bool   // use-host-path: create a sparse raw file of SizeBytes when missing
	Block     bool   // use-host-path / overlay backing: a block device is expected
	SizeBytes int64

	CloudInit *cloudinit.Config // build-iso
}

// VMPlan is the storage plan of one VM.
type VMPlan struct {
	VMDir   string
	Actions []Action
	// Disks are the QEMU disks, in DiskRequest order then volumes without a DiskRequest.
	// Host paths are as requested; Apply's Result has them resolved.
	Disks []qemu.Disk
	// DiskVolumes maps a disk id to its volume name.
	DiskVolumes map[string]string
	// Boot is the kernel boot (paths in VMDir, made by the link action); zero if none.
	Boot qemu.Boot
	// Owner is Options.Owner: who Apply hands the VM's files to (nil: nobody).
	Owner *Owner
}

// Pulls lists the images the plan pulls (as planned), in order.
func (p *VMPlan) Pulls() []string {
	var images []string
	for _, a := range p.Actions {
		if a.Kind == ActPull {
			images = append(images, a.Image)
		}
	}
	return images
}

// Sub-folders of VMDir.
const (
	disksDir = "disks"
	bootDir  = "boot"
)

// Plan turns volumes and disks into a VMPlan without touching the host: everything checkable
// without looking at files is checked here (names, exactly one source per volume, host paths
// beneath the root, known claims, image references, cloud-init data, disk options, and the
// resulting disks against qemu.Spec.Validate). Errors are *VolumeError.
func Plan(volumes []Volume, disks []DiskRequest, opts Options) (*VMPlan, error) {
	if !filepath.IsAbs(opts.VMDir) || filepath.Clean(opts.VMDir) != opts.VMDir || opts.VMDir == "/" {
		return nil, &VolumeError{Err: fmt.Errorf("vm folder %q must be an absolute clean path below /: %w", opts.VMDir, ErrInvalidVolume)}
	}
	pl := &planner{opts: opts, plan: &VMPlan{VMDir: opts.VMDir, DiskVolumes: map[string]string{}, Owner: opts.Owner},
		vols: map[string]*volumePlan{}, pulls: map[string]oci.PullPolicy{}}
	if err := pl.volumes(volumes); err != nil {
		return nil, err
	}
	if err := pl.disks(volumes, disks); err != nil {
		return nil, err
	}
	if err := pl.kernel(); err != nil {
		return nil, err
	}
	pl.plan.Actions = append(pl.pullActions, append(pl.volActions, pl.kernelActions...)...)
	spec := qemu.Spec{Name: "storage-plan", MemoryMiB: qemu.MinMemoryMiB, Disks: pl.plan.Disks, Boot: pl.plan.Boot}
	if err := spec.Validate(); err != nil {
		return nil, &VolumeError{Err: fmt.Errorf("check disks: %w: %w", ErrInvalidDisk, err)}
	}
	return pl.plan, nil
}

type planner struct {
	opts          Options
	plan          *VMPlan
	vols          map[string]*volumePlan
	pulls         map[string]oci.PullPolicy // image → policy of its pull action
	pullActions   []Action
	volActions    []Action
	kernelActions []Action
	cloudInits    int
}

// volumePlan is what a volume's disk looks like before disk options are applied.
type volumePlan struct {
	path     string
	format   qemu.DiskFormat
	readOnly bool // the source is read-only (a read-only claim)
	used     bool
}

// pull adds a pull action for image unless one exists; two policies for one image are refused.
// Pull secrets of several users of one image are merged (the first login per registry key).
func (pl *planner) pull(volume, image string, policy oci.PullPolicy, creds oci.Credentials) error {
	if err := oci.CheckReference(image); err != nil {
		return volErr(volume, err, "image")
	}
	if policy == "" {
		policy = oci.DefaultPullPolicy(image)
	}
	switch policy {
	case oci.PullAlways, oci.PullIfNotPresent, oci.PullNever:
	default:
		return volErr(volume, ErrInvalidVolume, "pull policy %q", policy)
	}
	if prev, ok := pl.pulls[image]; ok {
		if prev != policy {
			return volErr(volume, ErrInvalidVolume, "image %s is used with pull policies %s and %s", image, prev, policy)
		}
		for i := range pl.pullActions {
			if a := &pl.pullActions[i]; a.Image == image && creds != nil {
				a.Credentials = mergeCredentials(a.Credentials, creds)
			}
		}
		return nil
	}
	pl.pulls[image] = policy
	pl.pullActions = append(pl.pullActions, Action{Kind: ActPull, Volume: volume, Image: image, PullPolicy: policy, Credentials: creds})
	return nil
}

func mergeCredentials(a, b oci.Credentials) oci.Credentials {
	out := oci.Credentials{}
	for _, c := range []oci.Credentials{b, a} {
		for k, v := range c {
			out[k] = v
		}
	}
	return out
}

func (pl *planner) kernel() error {
	kb := pl.opts.KernelBoot
	if kb == nil {
		return nil
	}
	if kb.KernelPath == "" {
		return &VolumeError{Err: fmt.Errorf("kernel path is required: %w", ErrInvalidVolume)}
	}
	if err := pl.pull("", kb.Image, kb.PullPolicy, kb.Credentials); err != nil {
		return err
	}
	dir := filepath.Join(pl.opts.VMDir, bootDir)
	pl.plan.Boot = qemu.Boot{Kernel: filepath.Join(dir, "kernel"), Cmdline: kb.KernelArgs}
	if kb.InitrdPath != "" {
		pl.plan.Boot.Initrd = filepath.Join(dir, "initrd")
	}
	pl.kernelActions = append(pl.kernelActions, Action{Kind: ActLinkKernel, Path: pl.plan.Boot.Kernel,
		Image: kb.Image, ImagePath: kb.KernelPath, Initrd: pl.plan.Boot.Initrd, InitrdImagePath: kb.InitrdPath})
	return nil
}
