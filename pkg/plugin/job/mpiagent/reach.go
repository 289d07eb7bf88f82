package mpiagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// Dialer opens a connection to the agent of a host of the hostfile.
type Dialer func(ctx context.Context, host string) (net.Conn, error)

// UnreachableError names the hosts whose agents never answered, in the hostfile's order, each
// with its last error.
type UnreachableError struct {
	Hosts []string
	Last  map[string]error
}

func (e *UnreachableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the MPI agent of %d of the job's pods never answered: ", len(e.Hosts))
	for i, h := range e.Hosts {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s (%v)", h, e.Last[h])
	}
	return b.String()
}

// WaitReachable pings the agent of every host, again every interval, until each has answered
// with the job's key, and returns nil then. It gives up when ctx ends (the caller bounds the
// wait), with an *UnreachableError naming every host that never answered; an agent that
// refuses the key ends the wait at once, as waiting cannot mend it.
func WaitReachable(ctx context.Context, dial Dialer, key []byte, hosts []string, interval time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu      sync.Mutex
		last    = map[string]error{}
		refused error
		wg      sync.WaitGroup
	)
	for _, h := range hosts {
		last[h] = errors.New("not tried yet")
	}
	for _, h := range hosts {
		wg.Go(func() {
			for {
				err := ping(ctx, dial, key, h)
				mu.Lock()
				switch {
				case err == nil:
					delete(last, h)
				case errors.Is(err, ErrRefused):
					refused = fmt.Errorf("%s: %w", h, err)
					cancel()
				case ctx.Err() == nil:
					last[h] = err
				}
				mu.Unlock()
				if err == nil || errors.Is(err, ErrRefused) {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(interval):
				}
			}
		})
	}
	wg.Wait()
	if refused != nil {
		return refused
	}
	if len(last) == 0 {
		return nil
	}
	e := &UnreachableError{Last: last}
	for _, h := range hosts {
		if _, ok := last[h]; ok {
			e.Hosts = append(e.Hosts, h)
		}
	}
	return e
}

func ping(ctx context.Context, dial Dialer, key []byte, host string) error {
	return ask(ctx, dial, key, host, Request{Ping: true})
}

// ask sends a request that runs nothing (Ping, Done) to host's agent.
func ask(ctx context.Context, dial Dialer, key []byte, host string, req Request) error {
	conn, err := dial(ctx, host)
	if err != nil {
		return err
	}
	code, err := Run(ctx, conn, key, req, io.Discard, io.Discard)
	if err == nil && code != 0 {
		err = fmt.Errorf("the agent answered %d", code)
	}
	return err
}

// Finish tells the agent of every host, at once, that the launcher's world ended well, so that
// their pods end too; ctx bounds it. The error names the hosts not told, each with its error.
func Finish(ctx context.Context, dial Dialer, key []byte, hosts []string) error {
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() {
			if err := ask(ctx, dial, key, h, Request{Done: true}); err != nil {
				errs[i] = fmt.Errorf("%s: %w", h, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// WaitGone asks every host's agent again, every interval, until none answers (the connection
// fails: its supervisor stopped serving), and returns nil then; ctx bounds it, and the error
// names the hosts still answering.
func WaitGone(ctx context.Context, dial Dialer, key []byte, hosts []string, interval time.Duration) error {
	left := slices.Clone(hosts)
	for {
		if ctx.Err() != nil {
			return fmt.Errorf("still answering: %s", strings.Join(left, ", "))
		}
		still := left[:0]
		for _, h := range left {
			// A ping the bound cut short says nothing of the host: it is not gone.
			if ping(ctx, dial, key, h) == nil || ctx.Err() != nil {
				still = append(still, h)
			}
		}
		left = still
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still answering: %s", strings.Join(left, ", "))
		case <-time.After(interval):
		}
	}
}
