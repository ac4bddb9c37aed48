package subresources

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The API group and version served.
const (
	Group   = "subresources.vmlet.dev"
	Version = "v1alpha1"
	// Resource is the resource the subresources hang off (RBAC: virtualmachineinstances/<sub>).
	Resource = "virtualmachineinstances"
	// Unrestricted is the pseudo-subresource whose "update" permission lifts the QMP
	// allow-list (vmlet.dev:admin has it).
	Unrestricted = "qmp-unrestricted"
)

// prefix is the group-version's path.
const prefix = "/apis/" + Group + "/" + Version

// subresource is one served subresource: its verbs and whether it streams.
type subresource struct {
	name   string
	verbs  []string
	stream bool // long-running: no request timeout
}

// subresources are what discovery lists (vnc/screenshot and portforward/{port} are authorized
// as "vnc" and "portforward", the path segment after the VMI's name).
var subresources = []subresource{
	{"console", []string{"get"}, true},
	{"vnc", []string{"get"}, true},
	{"vnc/screenshot", []string{"get"}, false},
	{"qmp", []string{"get", "create"}, true},
	{"qmplog", []string{"get"}, true},
	{"guestosinfo", []string{"get"}, false},
	{"userlist", []string{"get"}, false},
	{"filesystemlist", []string{"get"}, false},
	{"pause", []string{"update"}, false},
	{"unpause", []string{"update"}, false},
	{"portforward", []string{"get"}, true},
}

// resourceList is the group-version's discovery document.
func resourceList() *metav1.APIResourceList {
	l := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: Group + "/" + Version}
	for _, s := range subresources {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: Resource + "/" + s.name, Namespaced: true, Kind: "VirtualMachineInstance", Verbs: s.verbs})
	}
	return l
}

// streaming reports whether sub is served long-running (no request timeout).
func streaming(sub string) bool {
	for _, s := range subresources {
		if s.name == sub {
			return s.stream
		}
	}
	return false
}
