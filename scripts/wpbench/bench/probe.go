package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/PID/stat: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// procCPU is the CPU time (user + system) process pid has used so far.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after it are counted
	// from its closing parenthesis.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// procRSS is the resident set size of process pid in bytes (VmRSS).
func procRSS(pid int) (int64, error) {
	var rss int64
	return rss, procStatus(pid, map[string]*int64{"VmRSS": &rss})
}

// procStatus reads sizes in kB from one read of /proc/PID/status (VmRSS, RssAnon,
// RssFile, …) into fields, in bytes: the kernel writes them from the same counters
// then, so VmRSS is the sum of its parts, which separate reads need not be.
func procStatus(pid int, fields map[string]*int64) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err
	}
	found := 0
	for line := range strings.Lines(string(b)) {
		name, v, ok := strings.Cut(line, ":")
		dst := fields[name]
		if !ok || dst == nil {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return fmt.Errorf("/proc/%d/status: %s: %w", pid, name, err)
		}
		*dst = kb << 10
		found++
	}
	if found < len(fields) {
		return fmt.Errorf("/proc/%d/status: %d of %d fields found", pid, found, len(fields))
	}
	return nil
}

// loadAvg is the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// redisStats is what one INFO answer tells of the server's work so far.
type redisStats struct {
	// Calls counts the commands run per command name (INFO commandstats), Usec the
	// time Redis spent in them (µs; a script's commands count in its EVALSHA too).
	Calls, Usec map[string]int64
	// CPU is used_cpu_sys + used_cpu_user.
	CPU time.Duration
	// UsedMemory is used_memory in bytes.
	UsedMemory int64
}

// readRedis reads INFO commandstats, cpu and memory.
func readRedis(ctx context.Context, rdb *redis.Client) (redisStats, error) {
	txt, err := rdb.Info(ctx, "commandstats", "cpu", "memory").Result()
	if err != nil {
		return redisStats{}, err
	}
	return parseInfo(txt), nil
}

// parseInfo reads the fields of redisStats out of an INFO answer.
func parseInfo(txt string) redisStats {
	st := redisStats{Calls: map[string]int64{}, Usec: map[string]int64{}}
	var cpu float64
	for line := range strings.SplitSeq(txt, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(k, "cmdstat_"):
			// cmdstat_evalsha:calls=12,usec=345,...
			for f := range strings.SplitSeq(v, ",") {
				if n, ok := strings.CutPrefix(f, "calls="); ok {
					st.Calls[strings.TrimPrefix(k, "cmdstat_")], _ = strconv.ParseInt(n, 10, 64)
				}
				if n, ok := strings.CutPrefix(f, "usec="); ok {
					st.Usec[strings.TrimPrefix(k, "cmdstat_")], _ = strconv.ParseInt(n, 10, 64)
				}
			}
		case k == "used_cpu_sys" || k == "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		case k == "used_memory":
			st.UsedMemory, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	st.CPU = time.Duration(cpu * float64(time.Second))
	return st
}

// series is a scrape of Prometheus text: each sample by its name and labels as
// written ("name{a=\"b\"}").
type series map[string]float64

// get GETs url and returns the body of a 200 answer; the caller closes it.
func get(ctx context.Context, hc *http.Client, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return resp.Body, nil
}

// scrape reads a /metrics page.
func scrape(ctx context.Context, hc *http.Client, url string) (series, error) {
	body, err := get(ctx, hc, url)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return parseSeries(body)
}

// fullScrape reads a whole /metrics page and returns its size.
func fullScrape(ctx context.Context, url string) (int64, error) {
	body, err := get(ctx, &http.Client{Timeout: 10 * time.Minute}, url)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	return io.Copy(io.Discard, body)
}

// parseSeries reads Prometheus text format (comments skipped, no timestamps).
func parseSeries(r io.Reader) (series, error) {
	s := series{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		s[line[:i]] = v
	}
	return s, sc.Err()
}

// sum adds the samples of metric name whose labels contain every one of match
// (each `key="value"`).
func (s series) sum(name string, match ...string) float64 {
	var t float64
	for k, v := range s {
		if !strings.HasPrefix(k, name) {
			continue
		}
		rest := k[len(name):]
		if rest != "" && rest[0] != '{' {
			continue
		}
		ok := true
		for _, m := range match {
			if !strings.Contains(rest, m) {
				ok = false
				break
			}
		}
		if ok {
			t += v
		}
	}
	return t
}

// label is the value of label key in a sample name, "" when it has none.
func label(sample, key string) string {
	_, rest, ok := strings.Cut(sample, key+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// delta is after minus before, sample by sample (a sample missing before counts as 0).
func (s series) delta(before series) series {
	d := series{}
	for k, v := range s {
		d[k] = v - before[k]
	}
	return d
}

// byLabel adds the samples of metric name per value of label key.
func (s series) byLabel(name, key string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range s {
		if strings.HasPrefix(k, name+"{") {
			out[label(k, key)] += v
		}
	}
	return out
}

// histMax is an upper bound of the largest observation a histogram delta holds: the
// smallest bucket bound that counts every observation (+Inf when only that one does),
// over the samples whose labels contain every one of match.
func (s series) histMax(name string, match ...string) float64 {
	total := s.sum(name+"_count", match...)
	if total == 0 {
		return 0
	}
	buckets := map[float64]float64{}
	for k, v := range s {
		if !strings.HasPrefix(k, name+"_bucket{") {
			continue
		}
		ok := true
		for _, m := range match {
			if !strings.Contains(k, m) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		le, err := strconv.ParseFloat(label(k, "le"), 64)
		if err != nil {
			continue
		}
		buckets[le] += v
	}
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	for _, le := range les {
		if buckets[le] >= total {
			return le
		}
	}
	return math.Inf(1)
}
