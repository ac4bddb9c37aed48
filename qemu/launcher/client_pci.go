package launcher

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/vmlet/vmlet/qemu"
)

// PCIDevices asks QEMU (query-pci through the launcher's monitor) where each device with a QEMU
// id sits: address → id, root ports' children included.
func (c *Client) PCIDevices(ctx context.Context) (map[qemu.PCIAddr]string, error) {
	reply, err := c.QMP(ctx, `{"execute": "query-pci"}`)
	if err != nil {
		return nil, err
	}
	var r struct {
		Return json.RawMessage `json:"return"`
		Error  *struct {
			Desc string `json:"desc"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(reply), &r); err != nil {
		return nil, fmt.Errorf("query-pci: %w", err)
	}
	if r.Error != nil {
		return nil, fmt.Errorf("query-pci: %s", r.Error.Desc)
	}
	return qemu.ParseQueryPCI(r.Return)
}
