package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The rendezvous is one line each way over TCP, the part of torchrun's c10d TCP store that
// matters here: every rank finds rank 0 by name and they all start together.
//
//	rank K -> rank 0:  "hello K WORLD"
//	rank 0 -> rank K:  "go WORLD"           once ranks 1..WORLD-1 have all said hello
//	rank 0 -> rank K:  "error MESSAGE"      when K's hello makes no sense

// rendezvous makes this rank take part: rank 0 serves on MASTER_PORT, the others join it.
func (t *trainer) rendezvous(ctx context.Context, e rankEnv) error {
	if e.Rank == 0 {
		ln, err := net.Listen("tcp", ":"+e.MasterPort)
		if err != nil {
			return err
		}
		defer ln.Close()
		t.printf("listening on %s for %d peers", ln.Addr(), e.WorldSize-1)
		return t.serveRendezvous(ctx, ln, e.WorldSize)
	}
	return t.joinRendezvous(ctx, e.MasterAddr, e.MasterPort, e.WorldSize)
}

// serveRendezvous is rank 0's side: accept every other rank once, then release them all.
func (t *trainer) serveRendezvous(ctx context.Context, ln net.Listener, world int) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	peers := map[int]net.Conn{}
	defer func() {
		for _, c := range peers {
			c.Close()
		}
	}()
	for len(peers) < world-1 {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%d of %d peers joined before the timeout: %w", len(peers), world-1, ctx.Err())
			}
			return err
		}
		rank, err := readHello(c, world)
		if err == nil {
			if _, dup := peers[rank]; dup {
				err = fmt.Errorf("rank %d joined twice", rank)
			}
		}
		if err != nil {
			fmt.Fprintf(c, "error %v\n", err)
			c.Close()
			return fmt.Errorf("peer %s: %w", c.RemoteAddr(), err)
		}
		peers[rank] = c
		t.printf("accepted rank %d from %s", rank, c.RemoteAddr())
	}
	ranks := make([]int, 0, len(peers))
	for r := range peers {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	t.printf("saw peers %s", joinInts(ranks))
	for _, r := range ranks {
		if _, err := fmt.Fprintf(peers[r], "go %d\n", world); err != nil {
			return fmt.Errorf("releasing rank %d: %w", r, err)
		}
	}
	t.printf("barrier passed, world size %d", world)
	return nil
}

func readHello(c net.Conn, world int) (int, error) {
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("reading hello: %w", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "hello" {
		return 0, fmt.Errorf("bad hello %q", line)
	}
	rank, err1 := strconv.Atoi(f[1])
	w, err2 := strconv.Atoi(f[2])
	switch {
	case err1 != nil || err2 != nil:
		return 0, fmt.Errorf("bad hello %q", line)
	case w != world:
		return 0, fmt.Errorf("rank %d has world size %d, rank 0 has %d", rank, w, world)
	case rank < 1 || rank >= world:
		return 0, fmt.Errorf("rank %d is outside 1..%d", rank, world-1)
	}
	return rank, nil
}

// joinRendezvous is the side of every other rank. Like torchrun's store client it keeps trying,
// resolving the name again each time: the headless Service's DNS record and rank 0's listener
// appear only once rank 0's pod has started, which can be after this one.
func (t *trainer) joinRendezvous(ctx context.Context, host, port string, world int) error {
	var (
		conn     net.Conn
		lastErr  string
		resolved string
		backoff  = 100 * time.Millisecond
	)
	note := func(msg string) { // prints a waiting reason once, not on every retry
		if msg != lastErr {
			t.printf("waiting: %s", msg)
			lastErr = msg
		}
	}
	for attempt := 1; conn == nil; attempt++ {
		addrs, err := net.DefaultResolver.LookupHost(ctx, host)
		if err == nil {
			if s := strings.Join(addrs, ","); s != resolved {
				t.printf("resolved MASTER_ADDR %s to %s", host, s)
				resolved = s
			}
			for _, a := range addrs {
				d := net.Dialer{Timeout: 2 * time.Second}
				c, derr := d.DialContext(ctx, "tcp", net.JoinHostPort(a, port))
				if derr == nil {
					conn = c
					t.printf("connected to rank 0 at %s after %d attempts", c.RemoteAddr(), attempt)
					break
				}
				err = derr
			}
		}
		if conn != nil {
			break
		}
		// An attempt that the deadline cut short says only "timeout": the reason given before
		// stays the reason.
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || lastErr == "" {
			note(err.Error())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rank 0 at %s:%s not reached: %s", host, port, lastErr)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if _, err := fmt.Fprintf(conn, "hello %d %d\n", t.rank, world); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("waiting for rank 0 to release the barrier: %w", err)
	}
	if msg, ok := strings.CutPrefix(strings.TrimSpace(line), "error "); ok {
		return fmt.Errorf("rank 0 refused: %s", msg)
	}
	if strings.TrimSpace(line) != fmt.Sprintf("go %d", world) {
		return fmt.Errorf("rank 0 said %q", line)
	}
	t.printf("barrier passed, world size %d", world)
	return nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
