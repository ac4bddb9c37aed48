package realcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// daemon starts one of the cluster's processes with its log file and the cluster lock (fd 3),
// detached into its own session or tied to this process by a parent-death signal.
func (c *Cluster) daemon(name string, detach bool, bin string, args ...string) error {
	logf, err := os.OpenFile(filepath.Join(c.l.logs(), name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
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
		return fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = cmd.Wait() }() // reap; teardown finds the process by its command line
	f, err := os.OpenFile(c.l.pidFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err == nil {
		fmt.Fprintf(f, "%s %d\n", name, cmd.Process.Pid)
		_ = f.Close()
	}
	return nil
}

func (c *Cluster) startContainerd(ctx context.Context, o Options) error {
	if err := os.WriteFile(c.l.ctrConfig(), []byte(containerdConfig(c.l)), 0o600); err != nil {
		return err
	}
	conf, err := cniConflist(c.l)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.l.cniConf(), "10-vmlet-cluster.conflist"), conf, 0o600); err != nil {
		return err
	}
	if err := c.daemon("containerd", o.Detach, "containerd", "--config", c.l.ctrConfig()); err != nil {
		return err
	}
	return waitFor(ctx, time.Minute, "containerd socket", func() bool {
		conn, err := net.Dial("unix", c.l.ctrSocket())
		if err == nil {
			_ = conn.Close()
		}
		return err == nil
	})
}

func (c *Cluster) startKube(o Options) error {
	kc, err := kubeletConfig(c.l, filepath.Join(c.l.pki(), "kubelet-client", "ca.crt"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.l.kubeletConfig(), kc, 0o600); err != nil {
		return err
	}
	sa := filepath.Join(c.l.apiserver(), saKey)
	ca := filepath.Join(c.l.apiserver(), "serving-ca.crt")
	if err := c.daemon("kube-controller-manager", o.Detach, filepath.Join(c.Bin, "kube-controller-manager"),
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
	if err := c.daemon("kube-scheduler", o.Detach, filepath.Join(c.Bin, "kube-scheduler"),
		"--kubeconfig="+c.l.userKubeconfig("kube-scheduler"),
		"--authentication-kubeconfig="+c.l.userKubeconfig("kube-scheduler"),
		"--authorization-kubeconfig="+c.l.userKubeconfig("kube-scheduler"),
		"--leader-elect=false",
		"--secure-port=0",
		"--cert-dir="+filepath.Join(c.l.Root, "kube-scheduler"),
	); err != nil {
		return err
	}
	return c.daemon("kubelet", o.Detach, filepath.Join(c.Bin, "kubelet"),
		"--config="+c.l.kubeletConfig(),
		"--kubeconfig="+c.l.userKubeconfig("kubelet"),
		"--root-dir="+c.l.kubelet(),
		"--cert-dir="+filepath.Join(c.l.kubelet(), "pki"),
		"--hostname-override="+c.NodeName,
		"--node-ip="+Gateway.String(),
		"--v=1",
	)
}

// waitReady waits for the node to be Ready and the default ServiceAccount (made by the
// controller-manager) to exist.
func (c *Cluster) waitReady(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	var last string
	err = waitFor(ctx, 3*time.Minute, "node Ready and default ServiceAccount", func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false
		}
		ready := false
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				ready = cond.Status == corev1.ConditionTrue
				last = "Ready=" + string(cond.Status) + ": " + cond.Message
			}
		}
		if !ready {
			return false
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

var _ = strconv.Itoa
