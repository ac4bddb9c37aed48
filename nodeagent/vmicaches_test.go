package nodeagent

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// TestUnionVMIs: VMIs come from the node's cache first, then from the migration caches (a
// VMI in several is listed once, the node's copy), other kinds only from the node's cache.
func TestUnionVMIs(t *testing.T) {
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = vmletv1.AddToScheme(scheme)
	vmi := func(name, node string) *vmletv1.VirtualMachineInstance {
		return &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name)},
			Status: vmletv1.VirtualMachineInstanceStatus{NodeName: node}}
	}
	main := fake.NewClientBuilder().WithScheme(scheme).WithObjects(vmi("here", "n1"), vmi("both", "n1"),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"}}).Build()
	target := fake.NewClientBuilder().WithScheme(scheme).WithObjects(vmi("incoming", "n2"), vmi("both", "stale")).Build()
	source := fake.NewClientBuilder().WithScheme(scheme).WithObjects(vmi("left", "n3"),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "q"}}).Build()
	u := UnionVMIs(main, []client.Reader{target, source})
	ctx := context.Background()
	for name, node := range map[string]string{"here": "n1", "both": "n1", "incoming": "n2", "left": "n3"} {
		var v vmletv1.VirtualMachineInstance
		if err := u.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &v); err != nil || v.Status.NodeName != node {
			t.Errorf("Get %s: node %q, %v; want %q", name, v.Status.NodeName, err, node)
		}
	}
	if err := u.Get(ctx, client.ObjectKey{Namespace: "default", Name: "nowhere"}, &vmletv1.VirtualMachineInstance{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get of a VMI in no cache: %v, want NotFound", err)
	}
	if err := u.Get(ctx, client.ObjectKey{Namespace: "default", Name: "q"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get of a pod only a migration cache holds: %v, want NotFound (pods come from the node's cache)", err)
	}
	var l vmletv1.VirtualMachineInstanceList
	if err := u.List(ctx, &l); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range l.Items {
		got = append(got, v.Name+"@"+v.Status.NodeName)
	}
	slices.Sort(got)
	if want := []string{"both@n1", "here@n1", "incoming@n2", "left@n3"}; !slices.Equal(got, want) {
		t.Errorf("List = %v, want %v", got, want)
	}
	var pods corev1.PodList
	if err := u.List(ctx, &pods); err != nil || len(pods.Items) != 1 || pods.Items[0].Name != "p" {
		t.Errorf("List pods = %+v, %v; want the node cache's p only", pods.Items, err)
	}
}
