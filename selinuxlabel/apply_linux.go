package selinuxlabel

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// XattrName is the extended attribute that holds a file's SELinux label.
const XattrName = "security.selinux"

// ErrSymlink is a planned path that is a symbolic link: its label is never written (lsetxattr
// would label the link, and following it would label whatever it points at).
var ErrSymlink = errors.New("path is a symbolic link")

// FileLabel reads path's label without following a symlink; ok is false when it has none.
// Equivalent to: getfattr -h -n security.selinux PATH
func FileLabel(path string) (label string, ok bool, err error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Lgetxattr(path, XattrName, buf)
		switch {
		case errors.Is(err, unix.ENODATA):
			return "", false, nil
		case errors.Is(err, unix.ERANGE):
			buf = make([]byte, 2*len(buf))
			continue
		case err != nil:
			return "", false, &os.PathError{Op: "lgetxattr", Path: path, Err: err}
		}
		b := buf[:n]
		if len(b) > 0 && b[len(b)-1] == 0 {
			b = b[:len(b)-1]
		}
		return string(b), true, nil
	}
}

// SetFileLabel writes path's label, refusing a symlink (ErrSymlink).
// Equivalent to: chcon -h CONTEXT PATH
func SetFileLabel(path, context string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("label %s: %w", path, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("label %s: %w", path, ErrSymlink)
	}
	// lsetxattr: should the path become a symlink after the check, the link is labelled, never
	// its target.
	if err := unix.Lsetxattr(path, XattrName, []byte(context), 0); err != nil {
		return fmt.Errorf("label %s: %w", path, &os.PathError{Op: "lsetxattr", Path: path, Err: err})
	}
	return nil
}

// Apply writes labels, first recording in the journal file each path's label before vmlet's
// first Apply (a path already in the journal keeps its recorded previous label: Apply again is
// idempotent, and a crash between the journal and the labels loses nothing). The journal's
// folder must exist.
func Apply(journal string, labels []Label) error {
	old, err := ReadJournal(journal)
	if err != nil {
		return err
	}
	byPath := map[string]Entry{}
	for _, e := range old {
		byPath[e.Path] = e
	}
	entries := old
	for _, l := range labels {
		if fi, err := os.Lstat(l.Path); err != nil {
			return fmt.Errorf("label %s: %w", l.Path, err)
		} else if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("label %s: %w", l.Path, ErrSymlink) // before the journal names it
		}
		if _, ok := byPath[l.Path]; ok {
			continue
		}
		prev, had, err := FileLabel(l.Path)
		if err != nil {
			return fmt.Errorf("label %s: %w", l.Path, err)
		}
		e := Entry{Label: l, Previous: prev, Had: had}
		byPath[l.Path] = e
		entries = append(entries, e)
	}
	if len(entries) != len(old) {
		if err := writeJournal(journal, entries); err != nil {
			return err
		}
	}
	for _, l := range labels {
		if err := SetFileLabel(l.Path, l.Context); err != nil {
			return err
		}
	}
	return nil
}

// RestoreJournal carries out Teardown for the journal file: host files get their previous
// labels back (a missing file is skipped: nothing to restore). The journal itself stays (it
// lives in the VM's folder, which goes next). Idempotent.
func RestoreJournal(journal string) error {
	entries, err := ReadJournal(journal)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range Teardown(entries) {
		fi, err := os.Lstat(r.Path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			err = ErrSymlink
		}
		if err == nil && r.Remove {
			if err = unix.Lremovexattr(r.Path, XattrName); errors.Is(err, unix.ENODATA) {
				err = nil
			}
		} else if err == nil {
			err = unix.Lsetxattr(r.Path, XattrName, []byte(r.Context), 0)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("restore label of %s: %w", r.Path, err))
		}
	}
	return errors.Join(errs...)
}

// ReadJournal reads a journal file (none: no entries).
func ReadJournal(journal string) ([]Entry, error) {
	b, err := os.ReadFile(journal)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read label journal: %w", err)
	}
	var entries []Entry
	if err := json.Unmarshal(b, &entries); err != nil {
		return nil, fmt.Errorf("read label journal %s: %w", journal, err)
	}
	return entries, nil
}

func writeJournal(journal string, entries []Entry) error {
	b, err := json.Marshal(entries)
	if err != nil {
		return fmt.Errorf("write label journal: %w", err)
	}
	tmp := journal + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write label journal: %w", err)
	}
	if err := os.Rename(tmp, journal); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write label journal: %w", err)
	}
	return nil
}
