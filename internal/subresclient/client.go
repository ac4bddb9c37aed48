package subresclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// GroupVersion is the aggregated API's group and version.
var GroupVersion = schema.GroupVersion{Group: "subresources.vmlet.dev", Version: "v1alpha1"}

// Resource is the resource whose subresources the API serves.
const Resource = "virtualmachineinstances"

// codecs decode the one object the API answers besides raw bodies: a metav1.Status error.
var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, GroupVersion)
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s)
}()

// Client reaches one API server's subresources.vmlet.dev/v1alpha1. Safe for concurrent use.
type Client struct {
	rest *rest.RESTClient
	// stream is rest without the config's whole-request timeout: qmplog -f and websockets
	// last as long as their context.
	stream    *rest.RESTClient
	streamCfg *rest.Config
}

// New is a client with cfg's server, TLS and credentials (a kubeconfig's, or a test's).
func New(cfg *rest.Config) (*Client, error) {
	rc, err := restClient(cfg)
	if err != nil {
		return nil, err
	}
	sc := rest.CopyConfig(cfg)
	sc.Timeout = 0
	stream, err := restClient(sc)
	if err != nil {
		return nil, err
	}
	return &Client{rest: rc, stream: stream, streamCfg: sc}, nil
}

func restClient(cfg *rest.Config) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &GroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("subresources client: %w", err)
	}
	return rc, nil
}

// VMI names one VirtualMachineInstance.
type VMI struct{ Namespace, Name string }

func (v VMI) String() string { return v.Namespace + "/" + v.Name }

func (c *Client) request(rc *rest.RESTClient, verb string, vmi VMI, sub ...string) *rest.Request {
	return rc.Verb(verb).Namespace(vmi.Namespace).Resource(Resource).Name(vmi.Name).SubResource(sub...)
}

// doRaw runs r and returns the body as served; an error answer is an *apierrors.StatusError
// decoded from its metav1.Status body when it has one.
func doRaw(ctx context.Context, r *rest.Request) ([]byte, error) {
	res := r.Do(ctx)
	if err := res.Error(); err != nil {
		return nil, err
	}
	return res.Raw()
}

// URL is the address of one subresource (for messages, and the websocket dial).
func (c *Client) URL(vmi VMI, sub ...string) *url.URL {
	return c.request(c.rest, "GET", vmi, sub...).URL()
}

// getJSON GETs sub and decodes its JSON answer into out.
func (c *Client) getJSON(ctx context.Context, vmi VMI, sub string, out any) error {
	b, err := doRaw(ctx, c.request(c.rest, "GET", vmi, sub))
	if err != nil {
		return fmt.Errorf("get %s of vmi %s: %w", sub, vmi, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode %s of vmi %s: %w", sub, vmi, err)
	}
	return nil
}

// GuestOSInfo is GET guestosinfo: what the guest agent says (KubeVirt's shape).
func (c *Client) GuestOSInfo(ctx context.Context, vmi VMI) (*GuestAgentInfo, error) {
	var out GuestAgentInfo
	return &out, c.getJSON(ctx, vmi, "guestosinfo", &out)
}

// UserList is GET userlist: the users logged in to the guest.
func (c *Client) UserList(ctx context.Context, vmi VMI) (*GuestOSUserList, error) {
	var out GuestOSUserList
	return &out, c.getJSON(ctx, vmi, "userlist", &out)
}

// FileSystemList is GET filesystemlist: the guest's mounted filesystems.
func (c *Client) FileSystemList(ctx context.Context, vmi VMI) (*FileSystemList, error) {
	var out FileSystemList
	return &out, c.getJSON(ctx, vmi, "filesystemlist", &out)
}

// Raw GETs a subresource and returns its body as served (JSON for the guest agent ones).
func (c *Client) Raw(ctx context.Context, vmi VMI, sub ...string) ([]byte, error) {
	b, err := doRaw(ctx, c.request(c.rest, "GET", vmi, sub...))
	if err != nil {
		return nil, fmt.Errorf("get %s of vmi %s: %w", joinSub(sub), vmi, err)
	}
	return b, nil
}

// Screenshot is GET vnc/screenshot: a PNG of the VM's display.
func (c *Client) Screenshot(ctx context.Context, vmi VMI) ([]byte, error) {
	return c.Raw(ctx, vmi, "vnc", "screenshot")
}

// Pause is PUT pause (the server sets spec.paused=true; 409 when already paused).
func (c *Client) Pause(ctx context.Context, vmi VMI) error {
	return c.put(ctx, vmi, "pause")
}

// Unpause is PUT unpause.
func (c *Client) Unpause(ctx context.Context, vmi VMI) error {
	return c.put(ctx, vmi, "unpause")
}

func (c *Client) put(ctx context.Context, vmi VMI, sub string) error {
	if _, err := doRaw(ctx, c.request(c.rest, "PUT", vmi, sub).Body([]byte("{}"))); err != nil {
		return fmt.Errorf("%s vmi %s: %w", sub, vmi, err)
	}
	return nil
}

// QMP is POST qmp: one QMP command object in, QEMU's reply object out, verbatim (an
// {"error":…} reply is a reply, not an error: see ReplyError). A command the caller may not
// send is a 403 StatusError.
func (c *Client) QMP(ctx context.Context, vmi VMI, command []byte) ([]byte, error) {
	b, err := doRaw(ctx, c.request(c.rest, "POST", vmi, "qmp").SetHeader("Content-Type", "application/json").Body(command))
	if err != nil {
		return nil, fmt.Errorf("qmp on vmi %s: %w", vmi, err)
	}
	return b, nil
}

// QMPLogOptions select what QMPLog streams.
type QMPLogOptions struct {
	// Tail is how many of the last entries come first (0: the server's default).
	Tail int
	// Follow keeps the stream open for new entries until ctx ends.
	Follow bool
}

// QMPLog is GET qmplog: f gets each entry until the stream ends (without Follow, after the
// tail), ctx ends, or f fails.
func (c *Client) QMPLog(ctx context.Context, vmi VMI, o QMPLogOptions, f func(QMPLogEntry) error) error {
	r := c.request(c.stream, "GET", vmi, "qmplog").Param("follow", strconv.FormatBool(o.Follow))
	if o.Tail > 0 {
		r = r.Param("tail", strconv.Itoa(o.Tail))
	}
	body, err := r.Stream(ctx)
	if err != nil {
		return fmt.Errorf("qmplog of vmi %s: %w", vmi, err)
	}
	defer body.Close()
	dec := json.NewDecoder(body)
	for {
		var e QMPLogEntry
		if err := dec.Decode(&e); err == io.EOF {
			return nil
		} else if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("qmplog of vmi %s: %w", vmi, err)
		}
		if err := f(e); err != nil {
			return err
		}
	}
}

func joinSub(sub []string) string { return strings.Join(sub, "/") }
