package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Usage is what the kernel accounted to one finished child process.
type Usage struct {
	User   time.Duration
	System time.Duration
	MaxRSS int64 // bytes
}

// CPU is user plus system time.
func (u Usage) CPU() time.Duration { return u.User + u.System }

// usageOf reads the rusage of an exited process.
func usageOf(ps *os.ProcessState) (Usage, error) {
	if ps == nil {
		return Usage{}, fmt.Errorf("process has not exited")
	}
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return Usage{}, fmt.Errorf("no rusage on %s", runtime.GOOS)
	}
	return fromRusage(ru, runtime.GOOS), nil
}

// fromRusage converts a rusage. ru_maxrss is in KiB on Linux and in bytes on macOS.
func fromRusage(ru *syscall.Rusage, goos string) Usage {
	tv := func(t syscall.Timeval) time.Duration {
		return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
	}
	rss := int64(ru.Maxrss)
	if goos != "darwin" {
		rss *= 1024
	}
	return Usage{User: tv(ru.Utime), System: tv(ru.Stime), MaxRSS: rss}
}

// hostCPU is the machine's busy CPU time so far, from /proc/stat: what the broker, the
// database and everything else on the host spent, to compare rows by total cost. It is
// zero where /proc/stat does not exist.
func hostCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	return parseProcStat(b)
}

// parseProcStat sums the busy fields of the aggregate "cpu" line (user nice system irq
// softirq steal; idle and iowait are not busy). The unit is USER_HZ, 100 on Linux.
func parseProcStat(b []byte) time.Duration {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 || f[0] != "cpu" {
			continue
		}
		var busy int64
		for _, i := range []int{1, 2, 3, 6, 7, 8} {
			if i >= len(f) {
				break
			}
			n, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil || n < 0 || n > math.MaxInt64/int64(time.Second) {
				return 0
			}
			busy += n
		}
		return time.Duration(busy) * (time.Second / 100)
	}
	return 0
}

// loadAvg is the 1-minute load average, or -1 when unknown.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// selfPeakRSS is this process's peak resident set (VmHWM in /proc/self/status), or 0.
//
// The child reports it because its rusage ru_maxrss is not its own: Go starts children
// with vfork semantics (CLONE_VM), and Linux folds the high-water mark of the memory
// the child had before exec, which is the parent's, into the child's maxrss at exec
// time. The parent holding a 200k-message corpus would then show up in every row.
func selfPeakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	return parseVmHWM(b)
}

// parseVmHWM reads the "VmHWM:   1234 kB" line of /proc/<pid>/status, in bytes.
func parseVmHWM(b []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n < 0 || n > math.MaxInt64>>10 {
			return 0
		}
		return n << 10
	}
	return 0
}
