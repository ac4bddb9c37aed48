package imagebuild

import (
	"fmt"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Build plans spec, writes its layer and returns the image (OCI media types, linux/amd64),
// created at epoch.
func Build(spec Spec, epoch time.Time) (v1.Image, error) {
	entries, err := Plan(spec)
	if err != nil {
		return nil, err
	}
	layer, err := Layer(entries, epoch)
	if err != nil {
		return nil, err
	}
	return Image(spec, layer, epoch)
}

// Image puts layer on an empty image with spec's config.
func Image(spec Spec, layer v1.Layer, epoch time.Time) (v1.Image, error) {
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "vmlet internal/imagebuild", Comment: spec.Ref}})
	if err != nil {
		return nil, fmt.Errorf("build image %s: %w", spec.Ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("build image %s: %w", spec.Ref, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = spec.Entrypoint
	cf.Config.Cmd = spec.Cmd
	cf.Config.Env = spec.Env
	cf.Config.User = spec.User
	cf.Config.WorkingDir = spec.WorkingDir
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("build image %s: %w", spec.Ref, err)
	}
	return img, nil
}
