package realcluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// daemon starts one of the cluster's processes with its log file and the cluster lock (fd 3),
// detached into its own session or tied to this process by a parent-death signal.
func (c *Cluster) daemon(name string, detach bool, bin string, args ...string) (int, error) {
	logf, err := os.OpenFile(filepath.Join(c.l.logs(), name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{c.lock}
	cmd.Env = append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	if detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = cmd.Wait() }() // reap; teardown finds the process by its command line
	f, err := os.OpenFile(c.l.pidFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err == nil {
		fmt.Fprintf(f, "%s %d\n", name, cmd.Process.Pid)
		_ = f.Close()
	}
	return cmd.Process.Pid, nil
}

// startControllers starts kube-controller-manager and kube-scheduler.
func (c *Cluster) startControllers(o Options) error {
	sa := filepath.Join(c.l.apiserver(), saKey)
	ca := filepath.Join(c.l.apiserver(), "serving-ca.crt")
	if _, err := c.daemon("kube-controller-manager", o.Detach, filepath.Join(c.Bin, "kube-controller-manager"),
		"--kubeconfig="+c.l.userKubeconfig("kube-controller-manager"),
		"--service-account-private-key-file="+sa,
		"--root-ca-file="+ca,
		"--use-service-account-credentials=true",
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=*,-csrsigning,-nodeipam",
		"--service-cluster-ip-range="+ServiceSubnet.String(),
		"--cert-dir="+filepath.Join(c.l.Root, "kube-controller-manager"),
	); err != nil {
		return err
	}
	_, err := c.daemon("kube-scheduler", o.Detach, filepath.Join(c.Bin, "kube-scheduler"),
		"--kubeconfig="+c.l.userKubeconfig("kube-scheduler"),
		"--authentication-kubeconfig="+c.l.userKubeconfig("kube-scheduler"),
		"--authorization-kubeconfig="+c.l.userKubeconfig("kube-scheduler"),
		"--leader-elect=false",
		"--secure-port=0",
		"--cert-dir="+filepath.Join(c.l.Root, "kube-scheduler"),
	)
	return err
}

// waitReady waits for every node to be Ready and the default ServiceAccount (made by the
// controller-manager) to exist.
func (c *Cluster) waitReady(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	var last string
	err = waitFor(ctx, 3*time.Minute, "nodes Ready and default ServiceAccount", func() bool {
		for _, node := range c.Nodes {
			n, err := cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false
			}
			ready := false
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					ready = cond.Status == corev1.ConditionTrue
					last = node.Name + " Ready=" + string(cond.Status) + ": " + cond.Message
				}
			}
			if !ready {
				return false
			}
		}
		if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			last = "default ServiceAccount: " + err.Error()
			return false
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("%w (last: %s; logs in %s)", err, last, c.l.logs())
	}
	return nil
}

// waitFor polls cond every 200 ms until it holds, d passes or ctx ends.
func waitFor(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %w after %s", what, errTimeout, d)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// startKubeProxy starts the machine's kube-proxy (Services' cluster IPs routed by iptables,
// from the host and from pods) and waits until it has synced its rules once (its /healthz).
func (c *Cluster) startKubeProxy(ctx context.Context, o Options) error {
	conf, err := kubeProxyConfig(c.l, c.NodeName)
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.l.proxyConfig(), conf, 0o600); err != nil {
		return err
	}
	if _, err := c.daemon("kube-proxy", o.Detach, filepath.Join(c.Bin, "kube-proxy"), "--config="+c.l.proxyConfig(), "--v=1"); err != nil {
		return err
	}
	return waitFor(ctx, 2*time.Minute, "kube-proxy healthz", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", proxyHealth))
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
