package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubectl-tao/kubectl-tao/test/localcluster/gpustandin"
)

// The real node's GPUs: a device plugin speaking the kubelet's device-plugin API, so GPU
// capacity, accounting and placement go through the real kubelet. It advertises fake devices
// and answers Allocate the way NVIDIA's plugin does with its default uuid strategy: the
// container gets NVIDIA_VISIBLE_DEVICES=<the allocated device IDs, comma separated>.

// devicePluginSocket is the plugin's socket name for resource in the kubelet's device-plugin
// directory: one socket a resource, since a registration names one resource.
func devicePluginSocket(stateDir string, resource corev1.ResourceName) string {
	if resource == GPUResource {
		return "kubectl-tao-" + nodeID(stateDir) + ".sock"
	}
	return "kubectl-tao-" + nodeID(stateDir) + "-" + strings.TrimPrefix(string(resource), "nvidia.com/") + ".sock"
}

// GPUDeviceIDs are the IDs of the fake GPUs, shaped like NVIDIA's GPU UUIDs and distinct per
// node.
func GPUDeviceIDs(stateDir string, n int) []string {
	id := nodeID(stateDir)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("GPU-%s-0000-4000-8000-%012d", id, i)
	}
	return ids
}

// PluginResource is one resource a device plugin advertises and its device IDs.
type PluginResource struct {
	Name corev1.ResourceName
	IDs  []string
}

// MIGGPUID is the device ID of the real node's GPU in MIG mode when it has gpus whole GPUs:
// the GPU after them, so the whole GPUs keep the IDs they have without slices.
func MIGGPUID(stateDir string, gpus int) string { return GPUDeviceIDs(stateDir, gpus+1)[gpus] }

// DevicePluginDevices are what the real node's plugin advertises: gpus whole GPUs
// (GPUDeviceIDs) as GPUResource and, with migSlices > 0, one more GPU in MIG mode (MIGGPUID)
// cut into that many MIGResource slices, advertised by their MIG UUIDs, as NVIDIA's plugin
// does under the MIG mixed strategy; those are the IDs the exporter stand-in maps to pods.
func DevicePluginDevices(stateDir string, gpus, migSlices int) ([]PluginResource, error) {
	out := []PluginResource{{Name: GPUResource, IDs: GPUDeviceIDs(stateDir, gpus)}}
	if migSlices == 0 {
		return out, nil
	}
	slices, err := gpustandin.MIGDevices(gpustandin.NodeGPUs(GPUDeviceIDs(stateDir, gpus+1))[gpus:], MIGProfile, migSlices)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(slices))
	for i, s := range slices {
		ids[i] = s.ID
	}
	return append(out, PluginResource{Name: MIGResource, IDs: ids}), nil
}

// AllocateResponse is NVIDIA's answer for one container's devices.
func AllocateResponse(req *pluginapi.AllocateRequest) *pluginapi.AllocateResponse {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(c.DevicesIds, ",")},
		})
	}
	return resp
}

type gpuPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
	done    <-chan struct{}
}

func (p *gpuPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices once: they never change health.
func (p *gpuPlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	select {
	case <-s.Context().Done():
	case <-p.done:
	}
	return nil
}

func (p *gpuPlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return AllocateResponse(req), nil
}

func (p *gpuPlugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *gpuPlugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// RunDevicePlugin serves gpus fake GPUs (and with migSlices > 0 the slices of one more,
// DevicePluginDevices) until ctx ends, a socket and a registration per resource, as NVIDIA's
// plugin does under the mixed strategy. The kubelet empties its device-plugin directory when it
// starts, so the plugin watches kubelet.sock and, each time a new kubelet socket appears, serves
// fresh sockets of its own and registers again.
func RunDevicePlugin(ctx context.Context, stateDir string, gpus, migSlices int, log io.Writer) error {
	stateDir, err := filepath.Abs(stateDir)
	if err != nil {
		return err
	}
	resources, err := DevicePluginDevices(stateDir, gpus, migSlices)
	if err != nil {
		return err
	}
	servers := make([]*pluginServer, len(resources))
	for i, r := range resources {
		servers[i] = &pluginServer{PluginResource: r, sockName: devicePluginSocket(stateDir, r.Name)}
	}
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	kubeletSock := filepath.Join(devicePluginDir, kubeletSocketName)
	var registeredIno uint64
	for {
		var st syscall.Stat_t
		if err := syscall.Stat(kubeletSock, &st); err == nil && st.Ino != registeredIno {
			registered := true
			for _, s := range servers {
				if err := s.serve(); err != nil {
					return err
				}
				if err := register(ctx, kubeletSock, s.sockName, s.Name); err != nil {
					fmt.Fprintf(log, "deviceplugin: register %s with the kubelet: %v (retrying)\n", s.Name, err)
					registered = false
					break
				}
				fmt.Fprintf(log, "deviceplugin: registered %d %s at %s\n", len(s.IDs), s.Name, filepath.Join(devicePluginDir, s.sockName))
			}
			if registered {
				registeredIno = st.Ino
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// pluginServer serves one resource's devices on a socket of its own.
type pluginServer struct {
	PluginResource
	sockName string
	server   *grpc.Server
	done     chan struct{}
}

// serve replaces the socket's server with a fresh one, for a kubelet that started anew.
func (s *pluginServer) serve() error {
	s.stop()
	var devices []*pluginapi.Device
	for _, id := range s.IDs {
		devices = append(devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	sockPath := filepath.Join(devicePluginDir, s.sockName)
	l, err := net.Listen("unix", sockPath)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", sockPath, err)
	}
	s.done = make(chan struct{})
	s.server = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(s.server, &gpuPlugin{devices: devices, done: s.done})
	go func(srv *grpc.Server) { _ = srv.Serve(l) }(s.server)
	return nil
}

func (s *pluginServer) stop() {
	if s.server != nil {
		close(s.done)
		s.server.Stop()
		s.server = nil
	}
	_ = os.Remove(filepath.Join(devicePluginDir, s.sockName))
}

func register(ctx context.Context, kubeletSock, endpoint string, resource corev1.ResourceName) error {
	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     endpoint,
		ResourceName: string(resource),
		Options:      &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		return errors.New(strings.TrimSpace(err.Error()))
	}
	return nil
}
