package casecret_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers/casecret"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestEnsureAndRead against a real API server: the first Ensure makes the namespace and the
// Secret, racing callers all get that one CA, Read returns it, and a Secret that holds no CA is
// an error, never replaced.
func TestEnsureAndRead(t *testing.T) {
	prereq.APIServer(t)
	env, err := apienv.Start(apienv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := client.ObjectKey{Namespace: "ca-test", Name: "test-ca"}
	if _, err := casecret.Read(ctx, env.Client, key); err == nil {
		t.Fatal("Read of a missing Secret: no error")
	}
	certs := make([][]byte, 4)
	var wg sync.WaitGroup
	for i := range certs {
		wg.Go(func() {
			ca, err := casecret.Ensure(ctx, env.Client, key, "test CA")
			if err != nil {
				t.Errorf("Ensure %d: %v", i, err)
				return
			}
			certs[i] = ca.CertPEM
		})
	}
	wg.Wait()
	for i := range certs {
		if !bytes.Equal(certs[i], certs[0]) {
			t.Errorf("Ensure %d returned another CA than Ensure 0", i)
		}
	}
	ca, err := casecret.Read(ctx, env.Client, key)
	if err != nil || !bytes.Equal(ca.CertPEM, certs[0]) {
		t.Fatalf("Read: %v, same CA %v", err, err == nil && bytes.Equal(ca.CertPEM, certs[0]))
	}
	bad := client.ObjectKey{Namespace: key.Namespace, Name: "not-a-ca"}
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: objMeta(bad), Data: map[string][]byte{"x": []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := casecret.Ensure(ctx, env.Client, bad, "test CA"); err == nil {
		t.Error("Ensure over a Secret that holds no CA: no error")
	}
}

func objMeta(k client.ObjectKey) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}
}
