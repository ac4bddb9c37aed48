package imagebuild

import (
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Plan lists the tar entries of spec's layer, sorted by name: every file, symlink and folder,
// and each parent folder not named (mode 0755). Pure: it reads no host file.
func Plan(spec Spec) ([]Entry, error) {
	byName := map[string]Entry{}
	add := func(field, p string, e Entry) error {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return &SpecError{Field: field, Reason: "path " + quote(p) + " must be absolute, clean and not /"}
		}
		e.Name = strings.TrimPrefix(p, "/")
		if old, dup := byName[e.Name]; dup && !(old.Type == TypeDir && e.Type == TypeDir && old.Mode == e.Mode) {
			return &SpecError{Field: field, Reason: "path " + quote(p) + " is given twice"}
		}
		byName[e.Name] = e
		return nil
	}
	for _, d := range spec.Dirs {
		if err := add("dirs", d.Path, Entry{Type: TypeDir, Mode: orDefault(d.Mode, 0o755)}); err != nil {
			return nil, err
		}
	}
	for _, f := range spec.Files {
		if err := add("files", f.Path, Entry{Type: TypeFile, Mode: orDefault(f.Mode, 0o644), Source: f.Source, Content: f.Content}); err != nil {
			return nil, err
		}
	}
	for _, l := range spec.Symlinks {
		if l.Target == "" {
			return nil, &SpecError{Field: "symlinks", Reason: "symlink " + quote(l.Path) + " has no target"}
		}
		if err := add("symlinks", l.Path, Entry{Type: TypeSymlink, Mode: 0o777, Target: l.Target}); err != nil {
			return nil, err
		}
	}
	// Parents: made 0755 when not named; a parent named as a file or symlink is an error.
	for name := range byName {
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			if e, ok := byName[d]; ok {
				if e.Type != TypeDir {
					return nil, &SpecError{Field: "files", Reason: "/" + d + " is a parent of /" + name + " but not a folder"}
				}
				continue
			}
			byName[d] = Entry{Name: d, Type: TypeDir, Mode: 0o755}
		}
	}
	out := make([]Entry, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func orDefault(m, def fs.FileMode) fs.FileMode {
	if m.Perm() == 0 {
		return def | m&fs.ModeSticky
	}
	return m & (fs.ModePerm | fs.ModeSticky)
}

func quote(s string) string { return "\"" + s + "\"" }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
