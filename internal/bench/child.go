package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// childOutcome is what one child process did and cost.
type childOutcome struct {
	Result  rowResult
	Wall    time.Duration // process start → result line
	Usage   Usage
	HostCPU time.Duration // busy CPU of the whole machine while the child ran
	// SelfCPU is this process's own CPU while the child ran: the publisher of the
	// end-to-end rows (the load generator), which HostCPU includes.
	SelfCPU time.Duration
	// ServiceCPU is what the broker and the database spent while the child ran.
	ServiceCPU map[string]time.Duration
	// Conditions are the load and calibration just before the child started.
	Conditions conditions
}

// reexec returns the program and leading arguments that run RowMain: this binary's
// hidden "bench-row" subcommand. Test binaries answer to it from TestMain.
func reexec() (string, []string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, fmt.Errorf("finding this executable: %w", err)
	}
	return exe, []string{"bench-row"}, nil
}

// runChild starts a child for a, calls during (when not nil) once the child reports
// ready, then closes the child's stdin and waits for its result and exit.
func runChild(ctx context.Context, a rowArgs, pids servicePIDs, during func(ctx context.Context) error) (childOutcome, error) {
	var out childOutcome
	exe, args, err := a.command()
	if err != nil {
		return out, err
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.WaitDelay = 10 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return out, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return out, err
	}
	stderr := &tailBuffer{max: 8 << 10}
	cmd.Stderr = stderr

	out.Conditions = measureConditions()
	cpu0, svc0, self0 := hostCPU(), serviceCPU(pids), selfCPU()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return out, fmt.Errorf("starting %s: %w", exe, err)
	}
	lines := make(chan string, 4)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	fail := func(err error) (childOutcome, error) {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if s := strings.TrimSpace(stderr.String()); s != "" {
			err = fmt.Errorf("%w\nchild stderr:\n%s", err, s)
		}
		return out, err
	}

	var gotResult bool
	readLine := func() (string, bool) {
		l, ok := <-lines
		return l, ok
	}
	if during != nil {
		l, ok := readLine()
		if !ok || l != lineReady {
			return fail(fmt.Errorf("row %s: child did not report ready (got %q)", a.Row, l))
		}
		if err := during(ctx); err != nil {
			return fail(fmt.Errorf("row %s: %w", a.Row, err))
		}
		// Closing stdin is the end-to-end child's signal to stop.
		_ = stdin.Close()
	}
	for l := range lines {
		if rest, ok := strings.CutPrefix(l, lineResult); ok && !gotResult {
			out.Wall = time.Since(start)
			if err := json.Unmarshal([]byte(rest), &out.Result); err != nil {
				return fail(fmt.Errorf("row %s: bad result line %q: %w", a.Row, l, err))
			}
			gotResult = true
		}
	}
	_ = stdin.Close()
	werr := cmd.Wait()
	// The child's database backends are credited to the postmaster's cutime only once
	// it has reaped them, a few milliseconds after they exit; read after that.
	time.Sleep(serviceSettle)
	out.HostCPU = hostCPU() - cpu0
	out.SelfCPU = selfCPU() - self0
	out.ServiceCPU = serviceCPU(pids)
	for k, v := range svc0 {
		out.ServiceCPU[k] -= v
	}
	if werr != nil {
		msg := fmt.Errorf("row %s: child failed: %w", a.Row, werr)
		if s := strings.TrimSpace(stderr.String()); s != "" {
			msg = fmt.Errorf("%w\nchild stderr:\n%s", msg, s)
		}
		return out, msg
	}
	if !gotResult {
		return out, fmt.Errorf("row %s: child exited without a result", a.Row)
	}
	out.Usage, err = usageOf(cmd.ProcessState)
	return out, err
}

// selfCPU is the CPU this process has used so far (user and system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serviceSettle is how long after the child's exit the service CPU is read.
const serviceSettle = 300 * time.Millisecond

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if over := t.buf.Len() - t.max; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}
