package hostile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Outcome is a case's expected outcome class.
type Outcome string

// Outcome classes.
const (
	Rejected Outcome = "rejected" // the API refuses the VMI
	Failed   Outcome = "failed"   // admitted; fails with a reason
	Runs     Outcome = "runs"     // admitted; reaches Running
)

// DefaultDeadline is how long an admitted case's outcome may take unless its header says.
const DefaultDeadline = 3 * time.Minute

// ErrInvalidCase is wrapped by every error about a case file.
var ErrInvalidCase = errors.New("invalid hostile case")

// Case is one parsed case file.
type Case struct {
	Name     string // the file's name without .yaml
	Expect   Outcome
	Field    string            // rejected: the field the API's message names
	Reason   string            // failed: the VMI's reason
	Message  string            // optional substring of the message
	Images   map[string]string // image reference → fixture name
	Patch    []byte            // JSON merge patch applied to each VMI right after create
	Deadline time.Duration
	About    string
	VMIs     []*unstructured.Unstructured
	Secrets  []*unstructured.Unstructured
}

// Vars are what a case's documents may refer to as {{.Name}}.
type Vars struct {
	GuestImage   string // the test guest as a kernelBoot image (kernel /vmlinuz, initrd /initramfs.gz)
	HostDiskRoot string // the agent's hostDisk root (the runner puts its fixture files there)
}

// Funcs are the template functions of a case's documents.
var Funcs = template.FuncMap{
	// repeat s n: s n times.
	"repeat": func(s string, n int) string { return strings.Repeat(s, n) },
	// seq n: 0 … n-1.
	"seq": func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = i
		}
		return s
	},
}

// Load parses every *.yaml case of dir, sorted by name. VMI names must be unique across the
// cases (the runner runs several at a time in one namespace).
func Load(dir string, vars Vars) ([]*Case, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("load cases: %w", err)
	}
	sort.Strings(files)
	var cases []*Case
	owner := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("load cases: %w", err)
		}
		c, err := Parse(strings.TrimSuffix(filepath.Base(f), ".yaml"), b, vars)
		if err != nil {
			return nil, err
		}
		for _, v := range append(append([]*unstructured.Unstructured{}, c.VMIs...), c.Secrets...) {
			key := v.GetKind() + "/" + v.GetName()
			if other, ok := owner[key]; ok {
				return nil, fmt.Errorf("%w: %s: %s is also in %s", ErrInvalidCase, c.Name, key, other)
			}
			owner[key] = c.Name
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// Parse reads one case file named name.
func Parse(name string, data []byte, vars Vars) (*Case, error) {
	c := &Case{Name: name, Images: map[string]string{}, Deadline: DefaultDeadline}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidCase, name, fmt.Sprintf(format, a...))
	}
	if err := c.parseHeader(data); err != nil {
		return nil, bad("%v", err)
	}
	switch c.Expect {
	case Rejected:
		if c.Field == "" {
			return nil, bad("expect rejected needs a field")
		}
	case Failed:
		if c.Reason == "" {
			return nil, bad("expect failed needs a reason")
		}
	case Runs:
	case "":
		return nil, bad("no expect line")
	default:
		return nil, bad("expect %q: want rejected, failed or runs", c.Expect)
	}
	tmpl, err := template.New(name).Funcs(Funcs).Option("missingkey=error").Parse(string(data))
	if err != nil {
		return nil, bad("template: %v", err)
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, vars); err != nil {
		return nil, bad("template: %v", err)
	}
	for i, doc := range splitDocuments(out.Bytes()) {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, bad("document %d: %v", i, err)
		}
		if obj == nil {
			continue // only comments
		}
		u := &unstructured.Unstructured{Object: obj}
		switch gvk := u.GroupVersionKind(); {
		case gvk.Group == "vmlet.dev" && gvk.Version == "v1alpha1" && gvk.Kind == "VirtualMachineInstance":
			c.VMIs = append(c.VMIs, u)
		case gvk.Group == "" && gvk.Version == "v1" && gvk.Kind == "Secret":
			c.Secrets = append(c.Secrets, u)
		default:
			return nil, bad("document %d: %s is neither a vmlet.dev/v1alpha1 VirtualMachineInstance nor a v1 Secret", i, gvk)
		}
		if u.GetName() == "" {
			return nil, bad("document %d: no metadata.name", i)
		}
	}
	if len(c.VMIs) == 0 {
		return nil, bad("no VirtualMachineInstance")
	}
	return c, nil
}

// parseHeader reads the "# key: value" lines before the first document.
func (c *Case) parseHeader(data []byte) error {
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "#") {
			return nil
		}
		key, value, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "#")), ":")
		if !ok {
			continue // a plain comment
		}
		value = strings.TrimSpace(value)
		switch strings.TrimSpace(key) {
		case "expect":
			c.Expect = Outcome(value)
		case "field":
			c.Field = value
		case "reason":
			c.Reason = value
		case "message":
			c.Message = value
		case "about":
			c.About = strings.TrimSpace(c.About + " " + value)
		case "image":
			ref, fixture, ok := strings.Cut(value, "=")
			if !ok || ref == "" || fixture == "" {
				return fmt.Errorf("image %q: want REF=FIXTURE", value)
			}
			if _, ok := Fixtures[fixture]; !ok {
				return fmt.Errorf("image %q: no fixture %q", value, fixture)
			}
			c.Images[ref] = fixture
		case "patch":
			var p map[string]any
			if err := yaml.Unmarshal([]byte(value), &p); err != nil {
				return fmt.Errorf("patch %q: not a JSON object: %w", value, err)
			}
			if p == nil {
				return fmt.Errorf("patch %q: not a JSON object", value)
			}
			c.Patch = []byte(value)
		case "deadline":
			d, err := time.ParseDuration(value)
			if err != nil || d <= 0 {
				return fmt.Errorf("deadline %q: want a positive duration", value)
			}
			c.Deadline = d
		default:
			if k := strings.TrimSpace(key); !strings.ContainsAny(k, " \t") {
				return fmt.Errorf("unknown header key %q", k) // a typo would silently change the case
			}
		}
	}
	return nil
}

// splitDocuments splits a YAML stream at "---" lines.
func splitDocuments(b []byte) [][]byte {
	var docs [][]byte
	var cur []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimRight(line, " \t") == "---" {
			docs = append(docs, []byte(strings.Join(cur, "\n")))
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	return append(docs, []byte(strings.Join(cur, "\n")))
}
