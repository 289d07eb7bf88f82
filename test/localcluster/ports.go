package localcluster

import (
	"errors"
	"fmt"
	"net"
)

// Ports are the loopback ports of one cluster. They are chosen fresh at every start so a
// second cluster (a test's, next to a developer's) or an unrelated process holding a
// well-known port such as 2379 or 6443 never collides with us.
type Ports struct {
	EtcdClient        int `json:"etcdClient"`
	EtcdPeer          int `json:"etcdPeer"`
	APIServer         int `json:"apiServer"`
	ControllerManager int `json:"controllerManager"`
	Scheduler         int `json:"scheduler"`
	Kwok              int `json:"kwok"`
}

func (p *Ports) all() []*int {
	return []*int{&p.EtcdClient, &p.EtcdPeer, &p.APIServer, &p.ControllerManager, &p.Scheduler, &p.Kwok}
}

// PortPicker returns a free loopback TCP port; injected so tests can simulate exhaustion and
// collisions.
type PortPicker func() (int, error)

// FreeLoopbackPort asks the kernel for an unused port on 127.0.0.1. The port is released
// before the component binds it, so a race is possible; Up detects "address already in use"
// in a component log and retries with new ports.
func FreeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// PickPorts fills every port with a distinct free one.
func PickPorts(pick PortPicker) (Ports, error) {
	var p Ports
	seen := map[int]bool{}
	for _, dst := range p.all() {
		// The kernel may hand back a port it just gave us since we close each listener; retry
		// a few times rather than fail on a duplicate.
		for attempt := 0; ; attempt++ {
			if attempt == 20 {
				return Ports{}, errors.New("could not find distinct free loopback ports after 20 attempts")
			}
			port, err := pick()
			if err != nil {
				return Ports{}, err
			}
			if port <= 0 || seen[port] {
				continue
			}
			seen[port] = true
			*dst = port
			break
		}
	}
	return p, nil
}
