package imagebuild

import (
	"io/fs"
	"time"
)

// Fixed image names: everyone (cluster bring-up, manifests, tests) refers to these.
const (
	VmletRef    = "vmlet.dev/vmlet:dev"
	LauncherRef = "vmlet.dev/vmlet-launcher:dev"
	PauseRef    = "vmlet.dev/pause:dev"
)

// Spec describes one image: a single layer built from host files, plus its config.
type Spec struct {
	// Ref is the image's name in the tarball, e.g. PauseRef.
	Ref string
	// Files are host files copied into the image.
	Files []File
	// Symlinks are symbolic links made in the image.
	Symlinks []Symlink
	// Dirs are folders made in the image with a given mode (parents of files are made 0755).
	Dirs []Dir
	// Entrypoint, Cmd, Env ("K=V"), User ("uid[:gid]") and WorkingDir go into the image config.
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
	WorkingDir string
}

// File is a host file copied into the image.
type File struct {
	Source  string      // host path
	Content []byte      // the file's content when Source is empty
	Path    string      // absolute path in the image
	Mode    fs.FileMode // permission bits (and fs.ModeSticky); 0 means 0644
}

// Symlink is a symbolic link Path → Target in the image.
type Symlink struct {
	Path, Target string
}

// Dir is a folder in the image.
type Dir struct {
	Path string
	Mode fs.FileMode // permission bits (and fs.ModeSticky); 0 means 0755
}

// EntryType is the kind of a layer entry.
type EntryType int

const (
	TypeDir EntryType = iota
	TypeFile
	TypeSymlink
)

// Entry is one tar entry of the planned layer.
type Entry struct {
	Name    string // path in the tar: relative, no leading slash; folders end without a slash
	Type    EntryType
	Mode    fs.FileMode
	Source  string // TypeFile: host path to read, or
	Content []byte // TypeFile: the content when Source is empty
	Target  string // TypeSymlink: link target
}

// Epoch is the modification time of every entry and the image's creation time: the time
// SOURCE_DATE_EPOCH names (seconds since the Unix epoch), or the epoch when it is unset.
func Epoch(sourceDateEpoch string) (time.Time, error) {
	if sourceDateEpoch == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	var secs int64
	for _, c := range sourceDateEpoch {
		if c < '0' || c > '9' || secs > (1<<62)/10 {
			return time.Time{}, &SpecError{Field: "SOURCE_DATE_EPOCH", Reason: "not a number of seconds: " + sourceDateEpoch}
		}
		secs = secs*10 + int64(c-'0')
	}
	return time.Unix(secs, 0).UTC(), nil
}

// SpecError says which part of a spec is wrong.
type SpecError struct {
	Field, Reason string
}

func (e *SpecError) Error() string { return "image spec: " + e.Field + ": " + e.Reason }
