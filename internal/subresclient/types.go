package subresclient

import (
	"time"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// GuestAgentInfo is the guestosinfo answer, KubeVirt's VirtualMachineInstanceGuestAgentInfo.
type GuestAgentInfo struct {
	GuestAgentVersion string                                    `json:"guestAgentVersion,omitempty"`
	SupportedCommands []GuestAgentCommandInfo                   `json:"supportedCommands,omitempty"`
	Hostname          string                                    `json:"hostname,omitempty"`
	OS                vmletv1.VirtualMachineInstanceGuestOSInfo `json:"os,omitempty"`
	Timezone          string                                    `json:"timezone,omitempty"`
	UserList          []GuestOSUser                             `json:"userList,omitempty"`
	FSInfo            FileSystemInfo                            `json:"fsInfo,omitempty"`
}

// GuestAgentCommandInfo is one command the guest agent supports.
type GuestAgentCommandInfo struct {
	Name    string `json:"name"`
	Enabled bool   `json:"enabled,omitempty"`
}

// GuestOSUser is one logged-in user (KubeVirt's VirtualMachineInstanceGuestOSUser); LoginTime
// is seconds since the epoch, as the guest agent reports it.
type GuestOSUser struct {
	UserName  string  `json:"userName"`
	Domain    string  `json:"domain,omitempty"`
	LoginTime float64 `json:"loginTime,omitempty"`
}

// Login is LoginTime as a time.
func (u GuestOSUser) Login() time.Time {
	sec := int64(u.LoginTime)
	return time.Unix(sec, int64((u.LoginTime-float64(sec))*1e9)).UTC()
}

// GuestOSUserList is the userlist answer (KubeVirt's VirtualMachineInstanceGuestOSUserList).
type GuestOSUserList struct {
	Items []GuestOSUser `json:"items"`
}

// FileSystemInfo is guestosinfo's fsInfo.
type FileSystemInfo struct {
	Filesystems []FileSystem `json:"disks,omitempty"`
}

// FileSystem is one mounted guest filesystem (KubeVirt's VirtualMachineInstanceFileSystem).
type FileSystem struct {
	DiskName       string `json:"diskName"`
	MountPoint     string `json:"mountPoint"`
	FileSystemType string `json:"fileSystemType"`
	UsedBytes      int64  `json:"usedBytes"`
	TotalBytes     int64  `json:"totalBytes"`
}

// FileSystemList is the filesystemlist answer (KubeVirt's VirtualMachineInstanceFileSystemList).
type FileSystemList struct {
	Items []FileSystem `json:"items"`
}

// QMPLogEntry is one line of the qmplog answer (application/x-ndjson).
type QMPLogEntry struct {
	Time time.Time `json:"time"`
	// Direction is "cmd", "reply" or "event".
	Direction string `json:"direction"`
	Text      string `json:"text"`
	// Origin is who sent the command: the agent, the debug socket, the API.
	Origin string `json:"origin,omitempty"`
	// Caller is the authenticated user of a command sent through the API.
	Caller string `json:"caller,omitempty"`
}
