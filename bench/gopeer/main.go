// Command gopeer is the benchmark's moonshot column (issue 29): Flux's notification-controller event path,
// written in Go with the standard library only, as cheap as Go makes it.
//
// For every POSTed event it does what Flux's internal/server/event_handlers.go does: read the body,
// apply the duplicate limiter (the key of Flux's eventKeyFunc: sha256 over involved object, message and
// revision; one event per key per 5 minutes, else 429), decode the JSON into Flux's Event shape, keep the
// metadata Flux keeps (keys under the involved object's API group or event.toolkit.fluxcd.io/, prefix
// stripped, checksum/digest dropped), scan every Alert like filterAlertsForEvent (suspend; event source
// kind, name with "*", namespace defaulting to the Alert's; severity; inclusion and exclusion lists),
// answer 202, and for each matching Alert build the generic provider's payload (the event with the
// Alert's summary and eventMetadata, json.Marshal) and POST it in its own goroutine with the
// gotk-component header.
//
// Where Flux is slower than it needs to be, this peer is not (it is the best Go can do, not a replay of
// Flux's costs): one pooled net/http client (Flux's postMessage builds a new retryablehttp client and
// transport per notification, so no connection is reused), regular expressions compiled once at start
// (Flux compiles them per event and Alert), no deep copies of the Alerts from an informer cache per event,
// no retries. Alert.spec.eventSources[].matchLabels is not supported (Flux reads the object for it).
//
// The Alerts and Providers come from a JSON file the benchmark writes from the same manifests it gives the
// controller: {"alerts": [<Alert object>...], "providers": [<Provider object>...]}. Only the generic
// provider type is sent (the benchmark uses no other). Usage:
//
//	gopeer --config FILE [--addr 127.0.0.1:0] [--concurrency 16]
//
// It prints "PORT <n>" once listening; on SIGTERM it stops accepting and waits (at most --drain) for the
// notifications in flight.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	eventPrefix   = "event.toolkit.fluxcd.io/"
	severityInfo  = "info"
	severityError = "error"
	maxBody       = 3 * 1024 * 1024
	limitWindow   = 5 * time.Minute
)

// ObjectReference is corev1.ObjectReference as Flux's events carry it.
type ObjectReference struct {
	Kind            string `json:"kind,omitempty"`
	Namespace       string `json:"namespace,omitempty"`
	Name            string `json:"name,omitempty"`
	UID             string `json:"uid,omitempty"`
	APIVersion      string `json:"apiVersion,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	FieldPath       string `json:"fieldPath,omitempty"`
}

// Time marshals like metav1.Time: RFC 3339 in UTC, whole seconds.
type Time struct{ time.Time }

func (t Time) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(t.UTC().Format(time.RFC3339))
}

func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		t.Time = time.Time{}
		return nil
	}
	return t.Time.UnmarshalJSON(b)
}

// Event is eventv1.Event (github.com/fluxcd/pkg/apis/event/v1beta1).
type Event struct {
	InvolvedObject      ObjectReference   `json:"involvedObject"`
	Severity            string            `json:"severity"`
	Timestamp           Time              `json:"timestamp"`
	Message             string            `json:"message"`
	Reason              string            `json:"reason"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	ReportingController string            `json:"reportingController"`
	ReportingInstance   string            `json:"reportingInstance,omitempty"`
}

type meta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

type sourceRef struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

// Alert is the part of notification.toolkit.fluxcd.io/v1beta3 Alert the event path reads.
type Alert struct {
	Metadata meta `json:"metadata"`
	Spec     struct {
		ProviderRef   struct{ Name string } `json:"providerRef"`
		EventSeverity string                `json:"eventSeverity"`
		EventSources  []sourceRef           `json:"eventSources"`
		InclusionList []string              `json:"inclusionList"`
		ExclusionList []string              `json:"exclusionList"`
		EventMetadata map[string]string     `json:"eventMetadata"`
		Summary       string                `json:"summary"`
		Suspend       bool                  `json:"suspend"`
	} `json:"spec"`
	inclusion []*regexp.Regexp
	exclusion []*regexp.Regexp
}

// Provider is the part of a v1beta3 Provider a generic provider needs.
type Provider struct {
	Metadata meta `json:"metadata"`
	Spec     struct {
		Type    string `json:"type"`
		Address string `json:"address"`
		Suspend bool   `json:"suspend"`
	} `json:"spec"`
}

type config struct {
	Alerts    []*Alert    `json:"alerts"`
	Providers []*Provider `json:"providers"`
}

// limiter is the duplicate limiter: one event per key per window (Flux: go-limiter's memorystore, 1 token
// per 5 minutes). Expired keys are swept once per window, so memory stays bounded by the window's events.
type limiter struct {
	mu    sync.Mutex
	seen  map[string]time.Time
	swept time.Time
}

func (l *limiter) allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > limitWindow {
		for k, until := range l.seen {
			if !now.Before(until) {
				delete(l.seen, k)
			}
		}
		l.swept = now
	}
	if until, ok := l.seen[key]; ok && now.Before(until) {
		return false
	}
	l.seen[key] = now.Add(limitWindow)
	return true
}

type server struct {
	alerts    []*Alert
	providers map[string]*Provider // namespace/name
	client    *http.Client
	limiter   *limiter
	inflight  sync.WaitGroup
}

// partial is what eventKeyFunc decodes (Flux decodes the whole event there, a second time).
type partial struct {
	InvolvedObject struct {
		Kind      string `json:"kind"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"involvedObject"`
	Message  string            `json:"message"`
	Metadata map[string]string `json:"metadata"`
}

func apiGroup(apiVersion string) string {
	if i := strings.IndexByte(apiVersion, '/'); i >= 0 {
		return apiVersion[:i]
	}
	return ""
}

// eventKey is Flux's eventKeyFunc key: sha256("event/name/namespace/kind/message[/revision]").
func eventKey(e *Event) string {
	parts := []string{"event", e.InvolvedObject.Name, e.InvolvedObject.Namespace, e.InvolvedObject.Kind, e.Message}
	if rev, ok := e.Metadata[apiGroup(e.InvolvedObject.APIVersion)+"/revision"]; ok {
		parts = append(parts, rev)
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, "/")))
	return hex.EncodeToString(sum[:])
}

// cleanupMetadata keeps the keys under the object's API group (and event.toolkit.fluxcd.io/), prefix
// stripped, without checksum and digest: Flux's cleanupMetadata.
func cleanupMetadata(e *Event) {
	group := apiGroup(e.InvolvedObject.APIVersion) + "/"
	out := make(map[string]string, len(e.Metadata))
	for key, value := range e.Metadata {
		var short string
		switch {
		case strings.HasPrefix(key, group):
			short = key[len(group):]
		case strings.HasPrefix(key, eventPrefix):
			short = key[len(eventPrefix):]
		default:
			continue
		}
		if short == "checksum" || short == "digest" {
			continue
		}
		out[short] = value
	}
	e.Metadata = out
}

func sourceMatches(e *Event, a *Alert, s sourceRef) bool {
	ns := s.Namespace
	if ns == "" {
		ns = a.Metadata.Namespace
	}
	if e.InvolvedObject.Namespace != ns || e.InvolvedObject.Kind != s.Kind {
		return false
	}
	if e.Severity != a.Spec.EventSeverity && a.Spec.EventSeverity != severityInfo {
		return false
	}
	return s.Name == "*" || e.InvolvedObject.Name == s.Name
}

// matches is filterAlertsForEvent for one Alert.
func matches(e *Event, a *Alert) bool {
	if a.Spec.Suspend {
		return false
	}
	found := false
	for _, s := range a.Spec.EventSources {
		if sourceMatches(e, a, s) {
			found = true
			break
		}
	}
	if !found {
		return false
	}
	if len(a.inclusion) > 0 {
		included := false
		for _, r := range a.inclusion {
			if r.MatchString(e.Message) {
				included = true
				break
			}
		}
		if !included {
			return false
		}
	}
	for _, r := range a.exclusion {
		if r.MatchString(e.Message) {
			return false
		}
	}
	return true
}

func (s *server) handleEvent(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	event := &Event{}
	if err := json.Unmarshal(body, event); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	obj := event.InvolvedObject
	if obj.Kind == "" || obj.Name == "" || obj.Namespace == "" || event.Message == "" ||
		(event.Severity != severityInfo && event.Severity != severityError) {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if !s.limiter.allow(eventKey(event), time.Now()) {
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	cleanupMetadata(event)
	var matched []*Alert
	for _, a := range s.alerts {
		if matches(event, a) {
			matched = append(matched, a)
		}
	}
	w.WriteHeader(http.StatusAccepted)
	for _, a := range matched {
		s.dispatch(event, a)
	}
}

// dispatch is dispatchNotification for the generic provider: the Alert's metadata onto a copy of the
// event, the payload marshalled, the POST in its own goroutine.
func (s *server) dispatch(e *Event, a *Alert) {
	p, ok := s.providers[a.Metadata.Namespace+"/"+a.Spec.ProviderRef.Name]
	if !ok || p.Spec.Suspend || p.Spec.Type != "generic" {
		return
	}
	n := *e
	n.Metadata = make(map[string]string, len(e.Metadata)+len(a.Spec.EventMetadata)+1)
	for k, v := range a.Spec.EventMetadata {
		n.Metadata[k] = v
	}
	for k, v := range e.Metadata {
		n.Metadata[k] = v
	}
	if a.Spec.Summary != "" {
		n.Metadata["summary"] = a.Spec.Summary
	}
	payload, err := json.Marshal(&n)
	if err != nil {
		return
	}
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		s.post(p.Spec.Address, n.ReportingController, payload)
	}()
}

func (s *server) post(address, component string, payload []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, address, strings.NewReader(string(payload)))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("gotk-component", component)
	resp, err := s.client.Do(req)
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

func load(path string) (*config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg := &config{}
	if err := json.Unmarshal(raw, cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, a := range cfg.Alerts {
		for _, exp := range a.Spec.InclusionList {
			r, err := regexp.Compile(exp)
			if err != nil {
				return nil, fmt.Errorf("alert %s/%s inclusionList: %w", a.Metadata.Namespace, a.Metadata.Name, err)
			}
			a.inclusion = append(a.inclusion, r)
		}
		for _, exp := range a.Spec.ExclusionList {
			r, err := regexp.Compile(exp)
			if err != nil {
				return nil, fmt.Errorf("alert %s/%s exclusionList: %w", a.Metadata.Namespace, a.Metadata.Name, err)
			}
			a.exclusion = append(a.exclusion, r)
		}
		if a.Spec.EventSeverity == "" {
			a.Spec.EventSeverity = severityInfo
		}
	}
	return cfg, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	configPath := flag.String("config", "", "JSON file with the Alerts and Providers")
	concurrency := flag.Int("concurrency", 16, "connections per provider address (the pool)")
	drain := flag.Duration("drain", 10*time.Second, "how long to wait for notifications in flight on SIGTERM")
	flag.Parse()
	log.SetFlags(0)
	cfg, err := load(*configPath)
	if err != nil {
		log.Fatalf("gopeer: %v", err)
	}
	s := &server{
		alerts:    cfg.Alerts,
		providers: make(map[string]*Provider, len(cfg.Providers)),
		limiter:   &limiter{seen: make(map[string]time.Time), swept: time.Now()},
		client: &http.Client{
			Timeout: 15 * time.Second,
			Transport: &http.Transport{
				MaxIdleConns:        *concurrency * 4,
				MaxIdleConnsPerHost: *concurrency,
				MaxConnsPerHost:     *concurrency,
				IdleConnTimeout:     90 * time.Second,
			},
		},
	}
	for _, p := range cfg.Providers {
		s.providers[p.Metadata.Namespace+"/"+p.Metadata.Name] = p
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("gopeer: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", s.handleEvent)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("PORT %d\n", ln.Addr().(*net.TCPAddr).Port)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case <-stop:
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			log.Fatalf("gopeer: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	_ = srv.Shutdown(ctx)
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
