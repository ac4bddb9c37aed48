package imagebuild

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// QEMUFilesFile is the list of the files QEMU and qemu-img load, in this package's folder: the
// measured (TestQEMUFiles -update), committed data the vmlet and launcher images are built
// from. Each line is "<image> <package> <path>": image is "launcher" or "vmlet", package the
// Debian package that ships path, path the file as it is shipped (a symlink is followed to
// its target when the image is built).
const QEMUFilesFile = "qemu-files.txt"

// Image names of the QEMU files list.
const (
	ListLauncher = "launcher"
	ListVmlet    = "vmlet"
)

// QEMUFile is one line of the list.
type QEMUFile struct {
	Image, Package, Path string
}

func (f QEMUFile) String() string { return f.Image + " " + f.Package + " " + f.Path }

// ParseQEMUFiles reads the list: blank lines and # comments are skipped.
func ParseQEMUFiles(r io.Reader) ([]QEMUFile, error) {
	var out []QEMUFile
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 || (f[0] != ListLauncher && f[0] != ListVmlet) || !path.IsAbs(f[2]) || path.Clean(f[2]) != f[2] {
			return nil, &SpecError{Field: QEMUFilesFile, Reason: fmt.Sprintf("line %d: want \"launcher|vmlet PACKAGE /ABS/PATH\", got %q", n, line)}
		}
		out = append(out, QEMUFile{Image: f[0], Package: f[1], Path: f[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", QEMUFilesFile, err)
	}
	return out, nil
}

// FormatQEMUFiles writes the list sorted, with a header saying how it is made.
func FormatQEMUFiles(w io.Writer, files []QEMUFile) error {
	files = append([]QEMUFile(nil), files...)
	sort.Slice(files, func(i, j int) bool { return files[i].String() < files[j].String() })
	var b strings.Builder
	b.WriteString("# Files QEMU (launcher) and qemu-img (vmlet, launcher) load, measured by booting the test guest\n")
	b.WriteString("# with the host's QEMU under strace: go test ./internal/imagebuild -run TestQEMUFiles -update\n")
	b.WriteString("# <image> <Debian package> <path as the package ships it>\n")
	for _, f := range files {
		b.WriteString(f.String() + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Packages are the distinct packages of files, sorted.
func Packages(files []QEMUFile) []string {
	seen := map[string]bool{}
	for _, f := range files {
		seen[f.Package] = true
	}
	return sortedKeys(seen)
}

// UsrPath is p under Debian's merged /usr: /lib/x → /usr/lib/x (also /bin, /sbin, /lib64).
func UsrPath(p string) string {
	for _, d := range []string{"/bin/", "/sbin/", "/lib/", "/lib64/"} {
		if strings.HasPrefix(p, d) {
			return "/usr" + p
		}
	}
	return p
}
