package vmistream

import (
	"context"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// The guest agent answers in KubeVirt's shapes (kubevirt.io/api/core/v1
// VirtualMachineInstanceGuestAgentInfo, VirtualMachineInstanceGuestOSUserList,
// VirtualMachineInstanceFileSystemList), so KubeVirt tooling reads them.

// GuestAgentInfo is the guestosinfo answer.
type GuestAgentInfo struct {
	GuestAgentVersion string         `json:"guestAgentVersion,omitempty"`
	Hostname          string         `json:"hostname,omitempty"`
	OS                GuestOSInfo    `json:"os"`
	UserList          []GuestUser    `json:"userList,omitempty"`
	FSInfo            FilesystemInfo `json:"fsInfo"`
}

// GuestOSInfo is the guest's os-release and uname.
type GuestOSInfo struct {
	Name          string `json:"name,omitempty"`
	KernelRelease string `json:"kernelRelease,omitempty"`
	Version       string `json:"version,omitempty"`
	PrettyName    string `json:"prettyName,omitempty"`
	VersionID     string `json:"versionId,omitempty"`
	KernelVersion string `json:"kernelVersion,omitempty"`
	Machine       string `json:"machine,omitempty"`
	ID            string `json:"id,omitempty"`
}

// GuestUser is one logged-in user.
type GuestUser struct {
	UserName  string  `json:"userName"`
	Domain    string  `json:"domain,omitempty"`
	LoginTime float64 `json:"loginTime,omitempty"` // seconds since the epoch, as KubeVirt
}

// Filesystem is one mounted guest file system.
type Filesystem struct {
	DiskName       string `json:"diskName"`
	MountPoint     string `json:"mountPoint"`
	FileSystemType string `json:"fileSystemType"`
	UsedBytes      int64  `json:"usedBytes"`
	TotalBytes     int64  `json:"totalBytes"`
}

// FilesystemInfo is guestosinfo's fsInfo.
type FilesystemInfo struct {
	Filesystems []Filesystem `json:"disks"`
}

// UserList is the userlist answer.
type UserList struct {
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GuestUser `json:"items"`
}

// FilesystemList is the filesystemlist answer.
type FilesystemList struct {
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Filesystem `json:"items"`
}

// callGuestInfo bounds the guest agent's answers.
const callGuestInfo = 15 * time.Second

// AgentInfo converts the launcher's GuestInfo answer. Pure.
func AgentInfo(g *pb.GuestInfoResponse) GuestAgentInfo {
	os := g.GetOs()
	out := GuestAgentInfo{GuestAgentVersion: g.GetAgentVersion(), Hostname: g.GetHostname(), OS: GuestOSInfo{
		Name: os.GetName(), KernelRelease: os.GetKernelRelease(), Version: os.GetVersion(), PrettyName: os.GetPrettyName(),
		VersionID: os.GetVersionId(), KernelVersion: os.GetKernelVersion(), Machine: os.GetMachine(), ID: os.GetId(),
	}}
	for _, u := range g.GetUsers() {
		out.UserList = append(out.UserList, GuestUser{UserName: u.GetName(), Domain: u.GetDomain(), LoginTime: float64(u.GetLoginTimeUnixNano()) / 1e9})
	}
	out.FSInfo.Filesystems = []Filesystem{}
	for _, f := range g.GetFilesystems() {
		out.FSInfo.Filesystems = append(out.FSInfo.Filesystems, Filesystem{DiskName: f.GetName(), MountPoint: f.GetMountpoint(),
			FileSystemType: f.GetType(), UsedBytes: int64(f.GetUsedBytes()), TotalBytes: int64(f.GetTotalBytes())})
	}
	return out
}

// agentInfo asks the launcher; 409 when the guest agent does not answer.
func (s *Server) agentInfo(w http.ResponseWriter, r *http.Request, t *target) (GuestAgentInfo, bool) {
	ctx, cancel := context.WithTimeout(r.Context(), callGuestInfo)
	defer cancel()
	c, err := t.dialLauncher(ctx)
	if err != nil {
		WriteStatus(w, apierrors.NewServiceUnavailable(err.Error()))
		return GuestAgentInfo{}, false
	}
	defer c.Close()
	g, err := c.GuestInfo(ctx)
	if err != nil {
		WriteStatus(w, apierrors.NewConflict(vmiResource, t.vmi.Name, err))
		return GuestAgentInfo{}, false
	}
	return AgentInfo(g), true
}

func (s *Server) guestOSInfo(w http.ResponseWriter, r *http.Request, t *target) {
	if info, ok := s.agentInfo(w, r, t); ok {
		WriteJSON(w, http.StatusOK, info)
	}
}

func (s *Server) userList(w http.ResponseWriter, r *http.Request, t *target) {
	if info, ok := s.agentInfo(w, r, t); ok {
		WriteJSON(w, http.StatusOK, UserList{Items: append([]GuestUser{}, info.UserList...)})
	}
}

func (s *Server) filesystemList(w http.ResponseWriter, r *http.Request, t *target) {
	if info, ok := s.agentInfo(w, r, t); ok {
		WriteJSON(w, http.StatusOK, FilesystemList{Items: info.FSInfo.Filesystems})
	}
}
