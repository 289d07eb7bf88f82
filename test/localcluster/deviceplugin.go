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

// devicePluginSocket is the plugin's socket name in the kubelet's device-plugin directory.
func devicePluginSocket(stateDir string) string { return "kubectl-tao-" + nodeID(stateDir) + ".sock" }

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

// DevicePluginDevices are the resource the real node's plugin advertises and its device IDs:
// gpus whole GPUs (GPUDeviceIDs), or with migSlices > 0 each of them cut into that many
// MIGResource slices, advertised by their MIG UUIDs as NVIDIA's plugin does under the MIG mixed
// strategy, the IDs the exporter stand-in maps to pods.
func DevicePluginDevices(stateDir string, gpus, migSlices int) (corev1.ResourceName, []string, error) {
	ids := GPUDeviceIDs(stateDir, gpus)
	if migSlices == 0 {
		return GPUResource, ids, nil
	}
	slices, err := gpustandin.MIGDevices(gpustandin.NodeGPUs(ids), MIGProfile, migSlices)
	if err != nil {
		return "", nil, err
	}
	out := make([]string, len(slices))
	for i, s := range slices {
		out[i] = s.ID
	}
	return MIGResource, out, nil
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

// RunDevicePlugin serves gpus fake GPUs (migSlices > 0: their slices, DevicePluginDevices)
// until ctx ends. The kubelet empties its device-plugin
// directory when it starts, so the plugin watches kubelet.sock and, each time a new kubelet
// socket appears, serves a fresh socket of its own and registers again.
func RunDevicePlugin(ctx context.Context, stateDir string, gpus, migSlices int, log io.Writer) error {
	stateDir, err := filepath.Abs(stateDir)
	if err != nil {
		return err
	}
	resource, ids, err := DevicePluginDevices(stateDir, gpus, migSlices)
	if err != nil {
		return err
	}
	var devices []*pluginapi.Device
	for _, id := range ids {
		devices = append(devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	sockName := devicePluginSocket(stateDir)
	sockPath := filepath.Join(devicePluginDir, sockName)
	kubeletSock := filepath.Join(devicePluginDir, kubeletSocketName)
	var server *grpc.Server
	var done chan struct{}
	stopServer := func() {
		if server != nil {
			close(done)
			server.Stop()
			server = nil
		}
		_ = os.Remove(sockPath)
	}
	defer stopServer()
	var registeredIno uint64
	for {
		var st syscall.Stat_t
		if err := syscall.Stat(kubeletSock, &st); err == nil && st.Ino != registeredIno {
			stopServer()
			done = make(chan struct{})
			l, err := net.Listen("unix", sockPath)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", sockPath, err)
			}
			server = grpc.NewServer()
			pluginapi.RegisterDevicePluginServer(server, &gpuPlugin{devices: devices, done: done})
			go func() { _ = server.Serve(l) }()
			if err := register(ctx, kubeletSock, sockName, resource); err != nil {
				fmt.Fprintf(log, "deviceplugin: register with the kubelet: %v (retrying)\n", err)
			} else {
				fmt.Fprintf(log, "deviceplugin: registered %d %s at %s\n", len(ids), resource, sockPath)
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
