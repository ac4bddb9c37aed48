package hostile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const vmiDoc = `apiVersion: vmlet.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: %s}
spec: {}
`

func doc(name string) string { return strings.Replace(vmiDoc, "%s", name, 1) }

func TestParse(t *testing.T) {
	in := `# expect: failed
# reason: HostPathNotAllowed
# message: /etc/passwd
# image: vmlet.dev/x:1=nodisk
# patch: {"spec":{"paused":true}}
# deadline: 90s
# about: a hostDisk
# about: outside the root
# Plain prose: with a colon after several words.
---
apiVersion: v1
kind: Secret
metadata: {name: s}
stringData: {userdata: "{{repeat "x" 3}}"}
---
apiVersion: vmlet.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: a}
spec:
  kernelArgs: "{{repeat "ab" 2}}"
  image: {{.GuestImage}}
  disks:
{{- range seq 2}}
  - name: d{{.}}
{{- end}}
---
# only a comment
---
` + doc("b")
	c, err := Parse("case", []byte(in), Vars{GuestImage: "oci:/g:test"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "case" || c.Expect != Failed || c.Reason != "HostPathNotAllowed" || c.Message != "/etc/passwd" ||
		c.Deadline != 90*time.Second || c.About != "a hostDisk outside the root" || string(c.Patch) != `{"spec":{"paused":true}}` {
		t.Errorf("header: %+v", c)
	}
	if c.Images["vmlet.dev/x:1"] != "nodisk" || len(c.Images) != 1 {
		t.Errorf("images: %v", c.Images)
	}
	if len(c.VMIs) != 2 || len(c.Secrets) != 1 || c.VMIs[0].GetName() != "a" || c.VMIs[1].GetName() != "b" {
		t.Fatalf("documents: %d VMIs, %d secrets", len(c.VMIs), len(c.Secrets))
	}
	spec := c.VMIs[0].Object["spec"].(map[string]any)
	if spec["kernelArgs"] != "abab" || spec["image"] != "oci:/g:test" || len(spec["disks"].([]any)) != 2 {
		t.Errorf("templated spec: %v", spec)
	}
	if got := c.Secrets[0].Object["stringData"].(map[string]any)["userdata"]; got != "xxx" {
		t.Errorf("secret data %q", got)
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse("r", []byte("# expect: rejected\n# field: spec.x\n"+doc("a")), Vars{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Deadline != DefaultDeadline || c.Patch != nil || len(c.Images) != 0 || c.Field != "spec.x" {
		t.Errorf("%+v", c)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"no expect":           doc("a"),
		"unknown outcome":     "# expect: crashes\n" + doc("a"),
		"rejected no field":   "# expect: rejected\n" + doc("a"),
		"failed no reason":    "# expect: failed\n" + doc("a"),
		"typo in a key":       "# expect: runs\n# deadlin: 1m\n" + doc("a"),
		"bad deadline":        "# expect: runs\n# deadline: soon\n" + doc("a"),
		"negative deadline":   "# expect: runs\n# deadline: -1s\n" + doc("a"),
		"patch not json":      "# expect: runs\n# patch: [1\n" + doc("a"),
		"image without =":     "# expect: runs\n# image: vmlet.dev/x:1\n" + doc("a"),
		"unknown fixture":     "# expect: runs\n# image: vmlet.dev/x:1=nosuch\n" + doc("a"),
		"no VMI":              "# expect: runs\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
		"other kind":          "# expect: runs\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\n---\n" + doc("a"),
		"kubevirt group":      "# expect: runs\n" + strings.Replace(doc("a"), "vmlet.dev", "kubevirt.io", 1),
		"no name":             "# expect: runs\n" + strings.Replace(doc("a"), "{name: a}", "{}", 1),
		"bad yaml":            "# expect: runs\n" + doc("a") + "spec: [\n",
		"unknown template":    "# expect: runs\n" + doc("{{.Nope}}"),
		"unknown template fn": "# expect: runs\n" + doc("{{nope 1}}"),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse("c", []byte(in), Vars{}); !errors.Is(err, ErrInvalidCase) {
				t.Errorf("err = %v, want ErrInvalidCase", err)
			}
		})
	}
}

func TestLoadDuplicateNames(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a.yaml", "b.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("# expect: runs\n"+doc("same")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Load(dir, Vars{}); !errors.Is(err, ErrInvalidCase) || !strings.Contains(err.Error(), "also in a") {
		t.Errorf("err = %v", err)
	}
}

// TestCases: every case file of the suite parses, and the suite covers what issue 19 asks:
// at least 60 cases, each outcome class present.
func TestCases(t *testing.T) {
	cases, err := Load("cases", Vars{GuestImage: "oci:/guest:test", HostDiskRoot: "/var/lib/hostile"})
	if err != nil {
		t.Fatal(err)
	}
	n := map[Outcome]int{}
	for _, c := range cases {
		n[c.Expect]++
	}
	if len(cases) < 60 || n[Rejected] == 0 || n[Failed] == 0 || n[Runs] == 0 {
		t.Errorf("%d cases %v: want at least 60 with every outcome", len(cases), n)
	}
}
