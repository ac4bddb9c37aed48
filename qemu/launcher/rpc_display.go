package launcher

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"io"
	"os"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// maxScreendumpBytes bounds the PNG Screenshot reads back (a 2560×1600 RGB display at worst
// compresses to a few MiB; the guest controls the pixels, not the file size beyond that).
const maxScreendumpBytes = 32 << 20

// Screenshot implements the RPC: QMP screendump (PNG) into a file of the launcher's run dir,
// read back, checked to decode as a PNG, and removed.
func (l *api) Screenshot(ctx context.Context, _ *pb.ScreenshotRequest) (*pb.ScreenshotResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	if !d.vm.HasDisplay() {
		return nil, fmt.Errorf("screenshot: %w: the domain was started without graphics", ErrNoDisplay)
	}
	// A fresh name per call in the run dir (0700, the launcher's): concurrent calls do not
	// share a file, and QEMU truncates the one the launcher created.
	f, err := os.CreateTemp(l.paths.Root, "screendump-*.png")
	if err != nil {
		return nil, fmt.Errorf("screenshot: %w", err)
	}
	path := f.Name()
	defer os.Remove(path)
	defer f.Close()
	if err := d.vm.Screendump(ctx, path); err != nil {
		return nil, fmt.Errorf("screenshot: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxScreendumpBytes+1))
	if err != nil {
		return nil, fmt.Errorf("screenshot: read: %w", err)
	}
	if len(b) > maxScreendumpBytes {
		return nil, fmt.Errorf("screenshot: %w: screendump larger than %d bytes", ErrQMP, maxScreendumpBytes)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("screenshot: %w: screendump is not a valid png: %w", ErrQMP, err)
	}
	r := img.Bounds()
	return &pb.ScreenshotResponse{Png: b, Width: int32(r.Dx()), Height: int32(r.Dy())}, nil
}
