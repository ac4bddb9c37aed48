package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of every vmlet resource.
const GroupName = "vmlet.dev"

var (
	// GroupVersion is the group version used to register these objects.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

	// SchemeBuilder registers the vmlet.dev/v1alpha1 types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types in this group-version to the given scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource returns a GroupResource for the given resource name in this group,
// e.g. Resource("virtualmachineinstances").
func Resource(resource string) schema.GroupResource {
	return GroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&VirtualMachineInstance{},
		&VirtualMachineInstanceList{},
		&VirtualMachineInstanceMigration{},
		&VirtualMachineInstanceMigrationList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
