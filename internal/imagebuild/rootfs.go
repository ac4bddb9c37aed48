package imagebuild

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// fromRoot adds the files of list meant for image (ListLauncher or ListVmlet) to spec, read
// from root: the Debian packages unpacked there (dpkg-deb -x). Files go under merged /usr
// (UsrPath); a symlink is kept, pointing at its target's /usr path, and its target is added
// too. Modes are 0755 for anything executable, else 0644, owner root: readable by any user.
func fromRoot(spec *Spec, root string, list []QEMUFile, image string) error {
	seen := map[string]bool{}
	var add func(p string, depth int) error
	add = func(p string, depth int) error {
		dst := UsrPath(p)
		if seen[dst] {
			return nil
		}
		if depth > 16 {
			return fmt.Errorf("image files: too many symlinks at %s", p)
		}
		src, fi, err := lstatInRoot(root, p)
		if err != nil {
			return err
		}
		seen[dst] = true
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return fmt.Errorf("image files: %w", err)
			}
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(p), target)
			}
			spec.Symlinks = append(spec.Symlinks, Symlink{Path: dst, Target: UsrPath(target)})
			return add(target, depth+1)
		case fi.Mode().IsRegular():
			mode := fs.FileMode(0o644)
			if fi.Mode()&0o111 != 0 {
				mode = 0o755
			}
			spec.Files = append(spec.Files, File{Source: src, Path: dst, Mode: mode})
			return nil
		default:
			return fmt.Errorf("image files: %s in %s is neither a file nor a symlink", p, root)
		}
	}
	n := 0
	for _, f := range list {
		if f.Image != image {
			continue
		}
		n++
		if err := add(f.Path, 0); err != nil {
			return err
		}
	}
	if n == 0 {
		return fmt.Errorf("image files: %s lists no file for %s", QEMUFilesFile, image)
	}
	return nil
}

// lstatInRoot finds p in root at the path a package ships it, or at its other merged-/usr name.
func lstatInRoot(root, p string) (string, fs.FileInfo, error) {
	for _, alias := range []string{p, UsrPath(p), strings.TrimPrefix(p, "/usr")} {
		src := filepath.Join(root, alias)
		if fi, err := os.Lstat(src); err == nil {
			return src, fi, nil
		}
	}
	return "", nil, fmt.Errorf("image files: %s is in none of the unpacked packages in %s (package versions changed? rerun TestQEMUFiles -update)", p, root)
}
