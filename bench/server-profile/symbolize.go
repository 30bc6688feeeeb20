// Command symbolize reads the call chains of `perf script -F ip` (one hex address per line, a blank
// line between samples) for a Go binary without a symbol table (the `temporal` CLI is stripped),
// names each frame from the binary's .gopclntab, and prints where the samples fall:
//
//	buckets     each sample counted once, in the first bucket (argument order) one of its frames contains
//	groups      each sample counted once, by the outermost frame that matches -group (else "(other)")
//	flat        the leaf frame
//	cumulative  every frame a sample passes through
//
// Used by bench/server-profile/report.sh; see BENCHMARKS.md, "Profiling the dev server".
package main

import (
	"bufio"
	"debug/elf"
	"debug/gosym"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// perf prints user-space addresses relative to the mapping; a non-PIE Go binary is linked at 0x400000.
const loadBase = 0x400000

func main() {
	bin := flag.String("bin", "", "the profiled Go binary")
	group := flag.String("group", "", "regexp: group samples by the outermost frame that matches")
	top := flag.Int("top", 40, "rows per list")
	flag.Parse()
	tab, err := table(*bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var gre *regexp.Regexp
	if *group != "" {
		gre = regexp.MustCompile(*group)
	}
	buckets := flag.Args()
	names := map[uint64]string{}
	name := func(pc uint64) string {
		if s, ok := names[pc]; ok {
			return s
		}
		s := "?"
		if fn := tab.PCToFunc(pc); fn != nil {
			s = fn.Name
		}
		names[pc] = s
		return s
	}

	flat, cum, groups := map[string]int{}, map[string]int{}, map[string]int{}
	inBucket := make([]int, len(buckets))
	total := 0
	var stack []string // leaf first
	flush := func() {
		if len(stack) == 0 {
			return
		}
		total++
		flat[stack[0]]++
		seen := map[string]bool{}
		for _, s := range stack {
			if !seen[s] {
				cum[s]++
				seen[s] = true
			}
		}
	buckets:
		for i, b := range buckets {
			for _, s := range stack {
				if strings.Contains(s, b) {
					inBucket[i]++
					break buckets
				}
			}
		}
		if gre != nil {
			groups[groupOf(stack, gre)]++
		}
		stack = stack[:0]
	}

	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			flush()
			continue
		}
		pc, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil || len(fields[0]) < 4 {
			continue // a sample's header line
		}
		if pc >= 0xffff000000000000 {
			stack = append(stack, "[kernel]")
			continue
		}
		pc += loadBase
		if len(stack) > 0 {
			pc-- // a return address: the call is the byte before it
		}
		stack = append(stack, name(pc))
	}
	flush()
	if total == 0 {
		fmt.Println("samples 0")
		return
	}

	pct := func(n int) string { return fmt.Sprintf("%6.1f%%", 100*float64(n)/float64(total)) }
	fmt.Printf("samples %d\n", total)
	if len(buckets) > 0 {
		fmt.Println("\n-- buckets (first match in argument order, any frame)")
		rest := total
		for i, b := range buckets {
			fmt.Println(pct(inBucket[i]), b)
			rest -= inBucket[i]
		}
		fmt.Println(pct(rest), "(none of them)")
	}
	if gre != nil {
		fmt.Println("\n-- groups (outermost frame matching -group)")
		for _, e := range sorted(groups, *top) {
			fmt.Println(pct(e.n), e.k)
		}
	}
	fmt.Println("\n-- flat")
	for _, e := range sorted(flat, *top) {
		fmt.Println(pct(e.n), e.k)
	}
	fmt.Println("\n-- cumulative")
	for _, e := range sorted(cum, *top*5) {
		fmt.Println(pct(e.n), e.k)
	}
}

func table(bin string) (*gosym.Table, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, err
	}
	sec := f.Section(".gopclntab")
	if sec == nil {
		return nil, fmt.Errorf("%s has no .gopclntab: not a Go binary?", bin)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	return gosym.NewTable(nil, gosym.NewLineTable(data, f.Section(".text").Addr))
}

// groupOf: the outermost frame that matches, else the outermost frame that is not the runtime's or
// gRPC's plumbing, marked "(other)".
func groupOf(stack []string, gre *regexp.Regexp) string {
	for i := len(stack) - 1; i >= 0; i-- {
		if m := gre.FindString(stack[i]); m != "" {
			return m
		}
	}
	for i := len(stack) - 1; i >= 0; i-- {
		s := stack[i]
		if !strings.HasPrefix(s, "runtime.") && !strings.Contains(s, "grpc") && s != "?" {
			return "(other) " + s
		}
	}
	return "(other) " + stack[len(stack)-1]
}

type entry struct {
	k string
	n int
}

func sorted(m map[string]int, n int) []entry {
	l := make([]entry, 0, len(m))
	for k, v := range m {
		l = append(l, entry{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].n > l[j].n || (l[i].n == l[j].n && l[i].k < l[j].k) })
	if len(l) > n {
		l = l[:n]
	}
	return l
}
