package bench

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// servicePIDs are the processes of the shared broker and database, found by the port
// they listen on: other engineers may run private brokers (java) on this host too.
type servicePIDs struct {
	Broker   int // the JVM listening on the STOMP port
	Postgres int // the postmaster listening on the database port
}

// findServices looks up the listeners of the two ports; a pid is 0 when not found
// (another host, another user's process, no /proc).
func findServices(stompPort, pgPort int) servicePIDs {
	inodes := map[string]int{} // socket inode → port
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for port, inode := range listeners(string(b)) {
			if port == stompPort || port == pgPort {
				inodes[inode] = port
			}
		}
	}
	var s servicePIDs
	if len(inodes) == 0 {
		return s
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		link, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		port, ok := inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")]
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(strings.Split(fd, "/")[2])
		if err != nil {
			continue
		}
		if port == stompPort && s.Broker == 0 {
			s.Broker = pid
		}
		if port == pgPort && s.Postgres == 0 {
			s.Postgres = pid
		}
	}
	return s
}

// listeners parses /proc/net/tcp{,6}: the local port and socket inode of every socket
// in state LISTEN (0A).
func listeners(table string) map[int]string {
	out := map[int]string{}
	sc := bufio.NewScanner(strings.NewReader(table))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		_, portHex, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		port, err := strconv.ParseUint(portHex, 16, 16)
		if err != nil {
			continue
		}
		out[int(port)] = f[9]
	}
	return out
}

// serviceCPU is the CPU time the broker and the database have consumed so far: the
// broker JVM's, and the postmaster's with all its children (exited backends through
// its cutime/cstime). The difference of two readings is what each spent in between,
// including work for other clients of the shared services.
func serviceCPU(p servicePIDs) map[string]time.Duration {
	out := map[string]time.Duration{}
	const tick = time.Second / 100 // USER_HZ
	if p.Broker > 0 {
		if st, ok := readPIDStat(p.Broker); ok {
			out["broker"] = time.Duration(st.self) * tick
		}
	}
	if p.Postgres > 0 {
		if st, ok := readPIDStat(p.Postgres); ok {
			total := st.self + st.children
			stats, _ := filepath.Glob("/proc/[0-9]*/stat")
			for _, f := range stats {
				b, err := os.ReadFile(f)
				if err != nil {
					continue // exited meanwhile
				}
				if c, ok := parsePIDStat(string(b)); ok && c.ppid == p.Postgres {
					total += c.self
				}
			}
			out["database"] = time.Duration(total) * tick
		}
	}
	return out
}

// pidStat is what we read of /proc/<pid>/stat, times in USER_HZ ticks.
type pidStat struct {
	name     string
	ppid     int
	self     int64 // utime + stime
	children int64 // cutime + cstime: children waited for
}

func readPIDStat(pid int) (pidStat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return pidStat{}, false
	}
	return parsePIDStat(string(b))
}

// parsePIDStat parses /proc/<pid>/stat. The command name is in parentheses and may
// itself hold spaces or ')', so fields are counted from the last ')'.
func parsePIDStat(s string) (pidStat, bool) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return pidStat{}, false
	}
	f := strings.Fields(s[end+1:])
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[11..14] fields 14..17 (utime,
	// stime, cutime, cstime).
	if len(f) < 15 {
		return pidStat{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return pidStat{}, false
	}
	var v [4]int64
	for i := range v {
		n, err := strconv.ParseInt(f[11+i], 10, 64)
		if err != nil || n < 0 || n > math.MaxInt64/8 {
			return pidStat{}, false
		}
		v[i] = n
	}
	return pidStat{name: s[open+1 : end], ppid: ppid, self: v[0] + v[1], children: v[2] + v[3]}, true
}
