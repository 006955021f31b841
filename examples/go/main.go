// Command goclient is a jobledger client that knows only Kafka, Avro and the published .avsc
// files, as examples/java's is: it registers a TaskExecutor at the ResourceManager, submits a
// JobGraph of one no-op vertex, runs each task deployed into its slots (INITIALIZING, RUNNING,
// FINISHED) and prints the services' decisions; it exits 0 when the job is FINISHED and 1 when
// it ends otherwise or not within the time limit.
//
// On a secured cluster (`jobledger broker --secure`) it connects with a principal's property
// file (--properties, librdkafka's keys) and signs every record with an Ed25519 key
// (--signing-key, the PKCS#8 PEM file `jobledger keys new` writes), as
// docs/reference/signing.md lays out.
//
// Usage: goclient --bootstrap HOST:PORT --schemas DIR [--prefix P] [--parallelism N]
// [--timeout-s S] [--properties FILE] [--signing-key FILE]
package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

const (
	producer    = "go-client"
	typeHeader  = "jobledger.type"
	signedBytes = "jobledger-record-v1"
)

// avroAPI writes each array and map block as its item count alone: the block's size in bytes
// after a negative count (hamba's default, which the spec allows) is refused by jobledger's
// reader as a corrupt body.
var avroAPI = avro.Config{DisableBlockSizeHeader: true}.Freeze()

// Avro's single-object encoding: two marker bytes, the writer schema's CRC-64-AVRO
// fingerprint (little-endian), then the binary body.
var marker = []byte{0xC3, 0x01}

type client struct {
	prefix      string
	schemas     map[string]avro.Schema // event type -> its schema
	byPrint     map[uint64]avro.Schema // fingerprint -> schema, to read any type we know
	kafka       *kgo.Client
	signer      *signer
	resourceID  string
	instanceID  string
	jobID       string
	deployments map[string]map[string]any
	ran         map[string]bool
}

// signer signs each record as jobledger's services check it: an Ed25519 signature over
// "jobledger-record-v1", then the topic, the key, the value and the type header's value,
// each as a 4-byte big-endian length and its bytes, carried in the headers jobledger.signer
// (the key id) and jobledger.signature (the 64 raw signature bytes).
type signer struct {
	key   ed25519.PrivateKey
	keyID string
}

func loadSigner(path string) (*signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	key, ok := parsed.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, not an Ed25519 key", path, parsed)
	}
	// the key id: the first 16 hex digits of the SHA-256 of the raw public key
	digest := sha256.Sum256(key.Public().(ed25519.PublicKey))
	return &signer{key, hex.EncodeToString(digest[:])[:16]}, nil
}

func (s *signer) sign(r *kgo.Record, typeName string) {
	signed := []byte(signedBytes)
	for _, part := range [][]byte{[]byte(r.Topic), r.Key, r.Value, []byte(typeName)} {
		signed = binary.BigEndian.AppendUint32(signed, uint32(len(part)))
		signed = append(signed, part...)
	}
	r.Headers = append(r.Headers,
		kgo.RecordHeader{Key: "jobledger.signer", Value: []byte(s.keyID)},
		kgo.RecordHeader{Key: "jobledger.signature", Value: ed25519.Sign(s.key, signed)})
}

// security is the Kafka options of a librdkafka property file (what `jobledger broker
// --secure` writes per principal): SASL/SCRAM credentials and a PEM CA for TLS.
func security(path string) ([]kgo.Opt, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	given := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if name, value, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			given[strings.TrimSpace(name)] = strings.TrimSpace(value)
		}
	}
	var opts []kgo.Opt
	if ca := given["ssl.ca.location"]; ca != "" {
		pemCA, err := os.ReadFile(ca)
		if err != nil {
			return nil, err
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pemCA) {
			return nil, fmt.Errorf("%s: no certificate in %s", path, ca)
		}
		opts = append(opts, kgo.DialTLSConfig(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}))
	}
	auth := scram.Auth{User: given["sasl.username"], Pass: given["sasl.password"]}
	switch given["sasl.mechanisms"] {
	case "":
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(auth.AsSha512Mechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(auth.AsSha256Mechanism()))
	default:
		return nil, fmt.Errorf("%s: SASL mechanism %q: this client speaks SCRAM", path, given["sasl.mechanisms"])
	}
	return opts, nil
}

// loadSchemas parses every named type in the published load order (types defined first),
// keeping each record's schema by name and by fingerprint.
func (c *client) loadSchemas(dir string) error {
	order, err := os.ReadFile(filepath.Join(dir, "load-order.txt"))
	if err != nil {
		return err
	}
	for _, file := range strings.Fields(string(order)) {
		schema, err := avro.ParseFiles(filepath.Join(dir, file))
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		record, ok := schema.(*avro.RecordSchema)
		if !ok {
			continue
		}
		print, err := record.FingerprintUsing(avro.CRC64Avro)
		if err != nil {
			return err
		}
		c.schemas[record.Name()] = record
		c.byPrint[binary.BigEndian.Uint64(print)] = record
	}
	return nil
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// event is an event with the header every event carries; unset fields take their defaults.
func event(fields map[string]any) map[string]any {
	fields["event_id"] = newID()
	fields["event_time"] = time.Now().UnixMilli()
	fields["producer"] = producer
	return fields
}

func (c *client) send(role, key, typeName string, fields map[string]any) error {
	schema := c.schemas[typeName]
	body, err := avroAPI.Marshal(schema, event(fields))
	if err != nil {
		return fmt.Errorf("%s: %w", typeName, err)
	}
	print, _ := schema.FingerprintUsing(avro.CRC64Avro)
	value := append(append([]byte{}, marker...), binary.LittleEndian.AppendUint64(nil, binary.BigEndian.Uint64(print))...)
	value = append(value, body...)
	record := &kgo.Record{Topic: c.prefix + role, Key: []byte(key), Value: value,
		Headers: []kgo.RecordHeader{{Key: typeHeader, Value: []byte(typeName)}}}
	if c.signer != nil {
		c.signer.sign(record, typeName)
	}
	return c.kafka.ProduceSync(context.Background(), record).FirstErr()
}

// decode reads a single-object encoded event; nil for a type newer than these schemas or a
// value in another format.
func (c *client) decode(value []byte) (string, map[string]any) {
	if len(value) < 10 || value[0] != marker[0] || value[1] != marker[1] {
		return "", nil
	}
	schema, ok := c.byPrint[binary.LittleEndian.Uint64(value[2:10])]
	if !ok {
		return "", nil
	}
	var fields map[string]any
	if avroAPI.Unmarshal(schema, value[10:], &fields) != nil {
		return "", nil
	}
	return schema.(*avro.RecordSchema).Name(), fields
}

// text is a field's value as text ("" where absent or null); a union's value may come as a
// one-entry map of its branch.
func text(fields map[string]any, name string) string {
	value := fields[name]
	if branch, ok := value.(map[string]any); ok && len(branch) == 1 {
		for _, v := range branch {
			value = v
		}
	}
	if value == nil {
		return ""
	}
	return fmt.Sprint(value)
}

func (c *client) register(slots int) error {
	return c.send("resourcemanager", c.resourceID, "TaskManagerRegistered", map[string]any{
		"resource_id": c.resourceID, "address": "go-client", "number_of_slots": slots,
		"resource_profile": map[string]any{"kind": "ANY"}, "instance_id": c.instanceID,
	})
}

func (c *client) heartbeat() error {
	return c.send("resourcemanager", c.resourceID, "TaskManagerHeartbeat", map[string]any{
		"resource_id": c.resourceID, "instance_id": c.instanceID,
	})
}

func (c *client) submit(parallelism int) error {
	vertex := map[string]any{"vertex_id": "noop", "name": "no-op tasks",
		"invokable_class_name": "noop", "parallelism": parallelism}
	steps := []struct {
		typeName string
		fields   map[string]any
	}{
		{"JobSubmitted", map[string]any{"job_id": c.jobID, "job_name": "submitted from Go",
			"vertices": []any{vertex}}},
		{"JobMasterLeadershipGranted", map[string]any{"job_id": c.jobID, "job_master_id": "jm-" + c.jobID}},
		{"ResourceManagerConnected", map[string]any{"job_id": c.jobID, "resource_manager_id": "resourcemanager"}},
	}
	for _, step := range steps {
		if err := c.send("job", c.jobID, step.typeName, step.fields); err != nil {
			return err
		}
	}
	return nil
}

// runTask is the task runner's part: a deployment accepted into our slot runs and finishes.
func (c *client) runTask(deployment map[string]any) error {
	attempt := text(deployment, "execution_attempt_id")
	for _, state := range []string{"INITIALIZING", "RUNNING", "FINISHED"} {
		err := c.send("job", c.jobID, "TaskExecutionStateChanged", map[string]any{
			"job_id": c.jobID, "job_master_id": text(deployment, "job_master_id"),
			"execution_attempt_id": attempt, "execution_state": state, "resource_id": c.resourceID,
		})
		if err != nil {
			return err
		}
	}
	return c.send("taskexecutor", c.resourceID, "TaskFinalStateReported", map[string]any{
		"job_id": c.jobID, "resource_id": c.resourceID, "execution_attempt_id": attempt,
		"execution_state": "FINISHED",
	})
}

// handle prints what concerns us; it returns the job's final status once it has one.
func (c *client) handle(typeName string, e map[string]any) (string, error) {
	ours := false
	for _, field := range []string{"resource_id", "job_id", "owner_id"} {
		if v := text(e, field); v == c.resourceID || v == c.jobID {
			ours = true
		}
	}
	if !ours {
		return "", nil
	}
	switch typeName {
	case "TaskManagerRegistrationAccepted":
		fmt.Printf("TaskExecutor %s registered at the ResourceManager\n", c.resourceID)
	case "SlotOfferAccepted":
		fmt.Printf("slot offer accepted: slot %s as allocation %s\n", text(e, "slot_index"), text(e, "allocation_id"))
	case "SlotOfferRejected":
		fmt.Printf("slot offer rejected: %s\n", text(e, "reason"))
	case "TaskDeploymentRequested":
		c.deployments[text(e, "execution_attempt_id")] = e
		fmt.Printf("task deployed: %s[%s] into slot %s\n", text(e, "vertex_id"), text(e, "subtask_index"), text(e, "slot_index"))
	case "TaskSubmissionAccepted":
		attempt := text(e, "execution_attempt_id")
		if deployment, ok := c.deployments[attempt]; ok && !c.ran[attempt] {
			c.ran[attempt] = true
			return "", c.runTask(deployment)
		}
	case "JobStatusChanged":
		to := text(e, "to_status")
		cause := ""
		if text(e, "cause") != "" {
			cause = " (" + text(e, "cause") + ")"
		}
		fmt.Printf("job %s: %s -> %s%s\n", c.jobID, text(e, "from_status"), to, cause)
		if to == "FINISHED" || to == "FAILED" || to == "CANCELED" {
			return to, nil
		}
	case "EventRejected":
		fmt.Printf("rejected: %s\n", text(e, "reason"))
	}
	return "", nil
}

func (c *client) run(parallelism int, timeout time.Duration) (string, error) {
	if err := c.register(parallelism); err != nil {
		return "", err
	}
	if err := c.submit(parallelism); err != nil {
		return "", err
	}
	fmt.Printf("submitted job %s (%d no-op tasks)\n", c.jobID, parallelism)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	nextHeartbeat := time.Time{}
	for ctx.Err() == nil {
		if time.Now().After(nextHeartbeat) {
			if err := c.heartbeat(); err != nil {
				return "", err
			}
			nextHeartbeat = time.Now().Add(2 * time.Second)
		}
		poll, stop := context.WithTimeout(ctx, 200*time.Millisecond)
		fetches := c.kafka.PollFetches(poll)
		stop()
		for _, err := range fetches.Errors() {
			if !errors.Is(err.Err, context.DeadlineExceeded) && !errors.Is(err.Err, context.Canceled) {
				return "", err.Err
			}
		}
		for _, record := range fetches.Records() {
			typeName, e := c.decode(record.Value)
			if e == nil {
				continue
			}
			end, err := c.handle(typeName, e)
			if err != nil || end != "" {
				return end, err
			}
		}
	}
	return "", nil
}

func main() {
	bootstrap := flag.String("bootstrap", "", "HOST:PORT")
	schemas := flag.String("schemas", "", "the directory of the published .avsc files")
	prefix := flag.String("prefix", "jobledger.", "the topic prefix")
	parallelism := flag.Int("parallelism", 2, "no-op tasks in the job")
	timeoutS := flag.Int("timeout-s", 120, "how long to wait for the job to end")
	properties := flag.String("properties", "", "a librdkafka property file (a secured cluster)")
	signingKey := flag.String("signing-key", "", "the Ed25519 key to sign with (PKCS#8 PEM)")
	flag.Parse()
	if *bootstrap == "" || *schemas == "" {
		fmt.Fprintln(os.Stderr, "usage: goclient --bootstrap HOST:PORT --schemas DIR [--prefix P] "+
			"[--parallelism N] [--timeout-s S] [--properties FILE] [--signing-key FILE]")
		os.Exit(2)
	}
	if err := mainErr(*bootstrap, *schemas, *prefix, *parallelism, *timeoutS, *properties, *signingKey); err != nil {
		fmt.Fprintln(os.Stderr, "goclient:", err)
		os.Exit(1)
	}
}

func mainErr(bootstrap, schemas, prefix string, parallelism, timeoutS int, properties, signingKey string) error {
	c := &client{
		prefix: prefix, schemas: map[string]avro.Schema{}, byPrint: map[uint64]avro.Schema{},
		resourceID: "go-tm-" + newID()[:8], instanceID: newID(), jobID: "go-job-" + newID()[:8],
		deployments: map[string]map[string]any{}, ran: map[string]bool{},
	}
	if err := c.loadSchemas(schemas); err != nil {
		return err
	}
	if signingKey != "" {
		s, err := loadSigner(signingKey)
		if err != nil {
			return err
		}
		c.signer = s
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		// Java's default partitioner for keyed records: murmur2 of the key, so our events and
		// the services' decisions about one owner meet in one partition
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// our ids are new, so nothing before this run concerns us: read from each start
		kgo.ConsumeTopics(prefix+"job", prefix+"taskexecutor"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
	if properties != "" {
		more, err := security(properties)
		if err != nil {
			return err
		}
		opts = append(opts, more...)
	}
	kafka, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer kafka.Close()
	c.kafka = kafka
	end, err := c.run(parallelism, time.Duration(timeoutS)*time.Second)
	if err != nil {
		return err
	}
	if end == "" {
		fmt.Printf("job %s did not end within %d s\n", c.jobID, timeoutS)
	}
	if end != "FINISHED" {
		os.Exit(1)
	}
	return nil
}
