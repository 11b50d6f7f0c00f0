package testredis

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// OldServer starts, on loopback, a stand-in for a Redis server of the given version
// (one too old for warmpool, say): it answers PING and INFO (whose server section
// names the version) and refuses every other command as a server that lacks it would,
// HELLO included, so clients speak RESP2 to it. It stops with the test. It returns
// its host:port.
func OldServer(tb testing.TB, version string) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	closed := false
	tb.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		closed = true
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			if closed {
				_ = c.Close()
			}
			mu.Unlock()
			go serveOld(c, version)
		}
	}()
	return ln.Addr().String()
}

// serveOld answers the commands of one connection to an OldServer until it closes.
func serveOld(c net.Conn, version string) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		cmd, err := readCommand(r)
		if err != nil {
			return
		}
		var reply string
		switch strings.ToUpper(cmd[0]) {
		case "PING":
			reply = "+PONG\r\n"
		case "INFO":
			info := "# Server\r\nredis_version:" + version + "\r\nredis_mode:standalone\r\n"
			reply = "$" + strconv.Itoa(len(info)) + "\r\n" + info + "\r\n"
		default:
			reply = fmt.Sprintf("-ERR unknown command '%s'\r\n", cmd[0])
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// readCommand reads one command in RESP: an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if !strings.HasPrefix(line, "*") || err != nil || n < 1 {
		return nil, errors.New("not a RESP array")
	}
	args := make([]string, n)
	for i := range args {
		head, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
		if !strings.HasPrefix(head, "$") || err != nil || size < 0 {
			return nil, errors.New("not a RESP bulk string")
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}
