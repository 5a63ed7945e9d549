// fake-openstack serves the parts of the OpenStack APIs that the Cluster API
// OpenStack provider (CAPO) calls over an OpenStackMachine's lifecycle, so
// tests can run the real CAPO manager without a cloud. Test harness only.
//
// Layout (one listener):
//
//	/identity/            Keystone: GET versions, GET /v3, POST and GET /v3/auth/tokens
//	/compute/v2.1/        Nova: flavors, servers (BUILD→ACTIVE or ERROR, or stuck in BUILD), AZs, server groups
//	/network/v2.0/        Neutron: networks, subnets, ports, security groups, trunks, tags
//	/image/v2/            Glance: images
//	/metrics              every call counted by service, method and status
//	/admin/faults         GET, PUT (JSON, see Faults) or DELETE: the faults injected
//	/admin/state          GET: servers and ports, for tests
//	/healthz              200
//
// A network "capo-net" with subnet "capo-subnet", flavor "m1.small", image
// "ubuntu" and security group "default" exist from the start (fixed IDs,
// see seed), so a cluster can use pre-existing networking.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fixed IDs of the seeded resources: tests put them into their specs.
const (
	ProjectID  = "f0a0e7b4a5b64f2c9e5a2f4c3d2b1a00"
	NetworkID  = "6c90b42f-7d4c-4c5a-9a40-5b1b2a7c0001"
	SubnetID   = "6c90b42f-7d4c-4c5a-9a40-5b1b2a7c0002"
	SecGroupID = "6c90b42f-7d4c-4c5a-9a40-5b1b2a7c0003"
	ImageID    = "6c90b42f-7d4c-4c5a-9a40-5b1b2a7c0004"
	FlavorID   = "1"
)

// Rule makes matching calls fail or slow down. Empty fields match anything.
type Rule struct {
	Service  string `json:"service,omitempty"`  // identity, compute, network, image
	Method   string `json:"method,omitempty"`   // GET, POST, ...
	Resource string `json:"resource,omitempty"` // servers, ports, flavors, ...
	// Zone matches calls about a server in this availability zone: its
	// create (the requested zone) and calls on /servers/{id}.
	Zone        string  `json:"zone,omitempty"`
	Status      int     `json:"status,omitempty"`      // 0: no error (only the delay)
	Probability float64 `json:"probability,omitempty"` // 0 means 1
	RetryAfter  int     `json:"retry_after,omitempty"` // seconds, sent with 429
	DelayMs     int     `json:"delay_ms,omitempty"`
	Times       int     `json:"times,omitempty"` // >0: only this many more hits
}

// Faults is the whole fault configuration, replaced by PUT /admin/faults.
type Faults struct {
	Rules []Rule `json:"rules"`
	// New servers in ServerErrorZone ("" = any) go to ERROR instead of
	// ACTIVE with this probability (0 = never).
	ServerError     float64 `json:"server_error,omitempty"`
	ServerErrorZone string  `json:"server_error_zone,omitempty"`
	// Servers created in ServerBuildStuckZone ("" = any) while this is
	// set stay in BUILD as long as it stays set, whatever their build
	// time; once it is cleared they show their fate (a slow Nova build
	// that the test ends).
	ServerBuildStuck     bool   `json:"server_build_stuck,omitempty"`
	ServerBuildStuckZone string `json:"server_build_stuck_zone,omitempty"`
	// Every compute, network and image call answers 404, as when the
	// credentials name another project.
	WrongProject bool `json:"wrong_project,omitempty"`
}

type obj = map[string]any

type server struct {
	body    obj
	created time.Time
	fate    string // ACTIVE or ERROR once built
	stuck   bool   // created under ServerBuildStuck
}

type fake struct {
	mu       sync.Mutex
	base     string
	build    time.Duration
	zones    []string
	faults   Faults
	counts   map[[3]string]int64 // service, method, status
	detailed map[[4]string]int64 // service, resource, method, status
	servers  map[string]*server
	neutron  map[string]map[string]obj // collection → id → object
	images   []obj
	flavors  []obj
	nextID   int
	nextIP   int
	rng      *rand.Rand
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	build := flag.Duration("build-time", time.Second, "how long a new server stays in BUILD")
	zones := flag.String("zones", "az1,az2", "availability zones, comma-separated")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	f := &fake{
		base:     "http://" + ln.Addr().String(),
		build:    *build,
		zones:    strings.Split(*zones, ","),
		counts:   map[[3]string]int64{},
		detailed: map[[4]string]int64{},
		servers:  map[string]*server{},
		neutron:  map[string]map[string]obj{},
		rng:      rand.New(rand.NewSource(time.Now().UnixNano())),
	}
	f.seed()
	log.Printf("fake-openstack listening on %s", f.base)
	log.Fatal(http.Serve(ln, f))
}

func (f *fake) seed() {
	now := "2026-01-01T00:00:00Z"
	f.neutron["networks"] = map[string]obj{NetworkID: {
		"id": NetworkID, "name": "capo-net", "status": "ACTIVE", "admin_state_up": true,
		"subnets": []any{SubnetID}, "tenant_id": ProjectID, "project_id": ProjectID,
		"shared": false, "router:external": false, "tags": []any{}, "mtu": 1500,
		"port_security_enabled": true, "description": "", "created_at": now, "updated_at": now,
	}}
	f.neutron["subnets"] = map[string]obj{SubnetID: {
		"id": SubnetID, "name": "capo-subnet", "network_id": NetworkID, "cidr": "10.6.0.0/24",
		"ip_version": 4, "gateway_ip": "10.6.0.1", "enable_dhcp": true, "tags": []any{},
		"allocation_pools": []any{obj{"start": "10.6.0.2", "end": "10.6.0.254"}},
		"dns_nameservers":  []any{}, "host_routes": []any{}, "tenant_id": ProjectID,
		"project_id": ProjectID, "description": "", "created_at": now, "updated_at": now,
	}}
	f.neutron["security-groups"] = map[string]obj{SecGroupID: {
		"id": SecGroupID, "name": "default", "description": "default", "tenant_id": ProjectID,
		"project_id": ProjectID, "security_group_rules": []any{}, "tags": []any{},
		"stateful": true, "created_at": now, "updated_at": now,
	}}
	for _, c := range []string{"ports", "trunks", "floatingips", "routers", "security-group-rules"} {
		f.neutron[c] = map[string]obj{}
	}
	f.images = []obj{{
		"id": ImageID, "name": "ubuntu", "status": "active", "visibility": "public",
		"tags": []any{}, "created_at": now, "updated_at": now, "size": 1 << 20,
		"min_disk": 0, "min_ram": 0, "disk_format": "qcow2", "container_format": "bare",
		"owner": ProjectID, "protected": false, "file": "/v2/images/" + ImageID + "/file",
		"schema": "/v2/schemas/image", "self": "/v2/images/" + ImageID,
	}}
	f.flavors = []obj{{
		"id": FlavorID, "name": "m1.small", "ram": 2048, "vcpus": 1, "disk": 20, "swap": 0,
		"OS-FLV-EXT-DATA:ephemeral": 0, "os-flavor-access:is_public": true, "rxtx_factor": 1.0,
		"description": nil, "extra_specs": obj{},
	}}
}

func (f *fake) newID() string {
	f.nextID++
	return fmt.Sprintf("00000000-0000-4000-8000-%012d", f.nextID)
}

// ---- HTTP plumbing ----

type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(s int) {
	r.status = s
	r.ResponseWriter.WriteHeader(s)
}

// call is one parsed API request.
type call struct {
	service  string
	resource string
	parts    []string // path segments after the service's version prefix
	body     obj
	zone     string
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.Trim(r.URL.Path, "/")
	switch {
	case path == "healthz":
		w.WriteHeader(200)
		return
	case path == "metrics":
		f.metrics(w)
		return
	case strings.HasPrefix(path, "admin/"):
		f.admin(w, r, strings.TrimPrefix(path, "admin/"))
		return
	}
	segs := strings.Split(path, "/")
	c := &call{service: segs[0]}
	raw, _ := io.ReadAll(r.Body)
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &c.body)
	}
	// Strip the version segment each service's endpoint carries.
	rest := segs[1:]
	if len(rest) > 0 && regexp.MustCompile(`^v[0-9.]+$`).MatchString(rest[0]) {
		rest = rest[1:]
	} else {
		rest = nil
		c.resource = "versions"
	}
	c.parts = rest
	if len(rest) > 0 {
		c.resource = rest[0]
	}
	if c.resource == "" {
		c.resource = "version"
	}
	rec := &recorder{ResponseWriter: w, status: 200}
	f.route(rec, r, c, segs)
	f.mu.Lock()
	f.counts[[3]string{c.service, r.Method, strconv.Itoa(rec.status)}]++
	f.detailed[[4]string{c.service, c.resource, r.Method, strconv.Itoa(rec.status)}]++
	f.mu.Unlock()
	log.Printf("%s %s -> %d", r.Method, r.URL.RequestURI(), rec.status)
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

func (f *fake) fail(w http.ResponseWriter, c *call, status int, msg string) {
	switch c.service {
	case "compute":
		key := map[int]string{400: "badRequest", 404: "itemNotFound", 429: "overLimit"}[status]
		if key == "" {
			key = "computeFault"
		}
		reply(w, status, obj{key: obj{"code": status, "message": msg}})
	case "network":
		reply(w, status, obj{"NeutronError": obj{"type": http.StatusText(status), "message": msg, "detail": ""}})
	default:
		reply(w, status, obj{"error": obj{"code": status, "message": msg, "title": http.StatusText(status)}})
	}
}

func (f *fake) route(w http.ResponseWriter, r *http.Request, c *call, segs []string) {
	// The zone a server call is about: the requested one on create, the
	// server's own on calls to /servers/{id}.
	f.mu.Lock()
	if c.service == "compute" && c.resource == "servers" {
		if s, ok := c.body["server"].(obj); ok {
			c.zone, _ = s["availability_zone"].(string)
		} else if len(c.parts) > 1 {
			if s := f.servers[c.parts[1]]; s != nil {
				c.zone, _ = s.body["OS-EXT-AZ:availability_zone"].(string)
			}
		}
	}
	rule := f.matchFault(r.Method, c)
	wrong := f.faults.WrongProject
	f.mu.Unlock()
	if rule != nil {
		if rule.DelayMs > 0 {
			time.Sleep(time.Duration(rule.DelayMs) * time.Millisecond)
		}
		if rule.Status != 0 {
			if rule.Status == 429 {
				ra := rule.RetryAfter
				if ra == 0 {
					ra = 1
				}
				w.Header().Set("Retry-After", strconv.Itoa(ra))
			}
			msg := fmt.Sprintf("injected fault: %d %s", rule.Status, http.StatusText(rule.Status))
			if rule.Status == 429 {
				// Nova's own overLimit text, without the code: what the
				// client makes of a 429 is what remedy has to read.
				msg = "This request was rate-limited."
			}
			f.fail(w, c, rule.Status, msg)
			return
		}
	}
	if wrong && c.service != "identity" && c.resource != "versions" && c.resource != "version" {
		f.fail(w, c, 404, "injected fault: wrong project, nothing found")
		return
	}
	switch c.service {
	case "identity":
		f.identity(w, r, c)
	case "compute":
		f.compute(w, r, c)
	case "network":
		f.network(w, r, c)
	case "image":
		f.image(w, r, c)
	default:
		f.fail(w, c, 404, "no such service")
	}
}

// matchFault returns the first rule matching the call (f.mu held).
func (f *fake) matchFault(method string, c *call) *Rule {
	for i := range f.faults.Rules {
		ru := &f.faults.Rules[i]
		if (ru.Service != "" && ru.Service != c.service) ||
			(ru.Method != "" && !strings.EqualFold(ru.Method, method)) ||
			(ru.Resource != "" && ru.Resource != c.resource) ||
			(ru.Zone != "" && ru.Zone != c.zone) {
			continue
		}
		if ru.Probability > 0 && ru.Probability < 1 && f.rng.Float64() >= ru.Probability {
			continue
		}
		if ru.Times > 0 {
			ru.Times--
			if ru.Times == 0 {
				// Used up: copy it out before it goes away.
				hit := *ru
				f.faults.Rules = append(f.faults.Rules[:i], f.faults.Rules[i+1:]...)
				return &hit
			}
		}
		hit := *ru
		return &hit
	}
	return nil
}

// ---- Keystone ----

func (f *fake) identity(w http.ResponseWriter, r *http.Request, c *call) {
	v3 := obj{"id": "v3.14", "status": "stable", "updated": "2024-01-01T00:00:00Z",
		"links":       []any{obj{"rel": "self", "href": f.base + "/identity/v3/"}},
		"media-types": []any{obj{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}}}
	switch {
	case c.resource == "versions":
		reply(w, 300, obj{"versions": obj{"values": []any{v3}}})
	case c.resource == "version":
		reply(w, 200, obj{"version": v3})
	case c.resource == "auth" && len(c.parts) > 1 && c.parts[1] == "tokens":
		if r.Method == http.MethodPost {
			w.Header().Set("X-Subject-Token", fmt.Sprintf("fake-token-%d", time.Now().UnixNano()))
			reply(w, 201, obj{"token": f.token()})
			return
		}
		if r.Header.Get("X-Subject-Token") == "" {
			f.fail(w, c, 404, "no token")
			return
		}
		reply(w, 200, obj{"token": f.token()})
	default:
		f.fail(w, c, 404, "not served by the fake")
	}
}

func (f *fake) token() obj {
	endpoint := func(typ, name, url string) obj {
		return obj{"type": typ, "name": name, "id": name, "endpoints": []any{
			obj{"id": name + "-public", "interface": "public", "region": "RegionOne", "region_id": "RegionOne", "url": url},
		}}
	}
	now := time.Now().UTC()
	domain := obj{"id": "default", "name": "Default"}
	return obj{
		"methods":    []any{"password"},
		"issued_at":  now.Format("2006-01-02T15:04:05.000000Z"),
		"expires_at": now.Add(12 * time.Hour).Format("2006-01-02T15:04:05.000000Z"),
		"user":       obj{"id": "u-capo", "name": "capo", "domain": domain, "password_expires_at": nil},
		"project":    obj{"id": ProjectID, "name": "capo", "domain": domain},
		"roles":      []any{obj{"id": "r-member", "name": "member"}},
		"catalog": []any{
			endpoint("identity", "keystone", f.base+"/identity/v3/"),
			endpoint("compute", "nova", f.base+"/compute/v2.1/"),
			endpoint("network", "neutron", f.base+"/network/"),
			endpoint("image", "glance", f.base+"/image/"),
		},
	}
}

// ---- Nova ----

func (f *fake) compute(w http.ResponseWriter, r *http.Request, c *call) {
	p := c.parts
	switch {
	case c.resource == "versions":
		reply(w, 300, obj{"versions": []any{f.novaVersion()}})
	case c.resource == "version":
		reply(w, 200, obj{"version": f.novaVersion()})
	case c.resource == "flavors":
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(p) == 1 || p[1] == "detail" {
			reply(w, 200, obj{"flavors": filter(f.flavors, r, nil)})
			return
		}
		for _, fl := range f.flavors {
			if fl["id"] == p[1] {
				reply(w, 200, obj{"flavor": fl})
				return
			}
		}
		f.fail(w, c, 404, "Flavor "+p[1]+" could not be found.")
	case c.resource == "os-availability-zone":
		var zs []any
		for _, z := range f.zones {
			zs = append(zs, obj{"zoneName": z, "zoneState": obj{"available": true}, "hosts": nil})
		}
		reply(w, 200, obj{"availabilityZoneInfo": zs})
	case c.resource == "os-server-groups":
		reply(w, 200, obj{"server_groups": []any{}})
	case c.resource == "servers":
		f.servers_(w, r, c)
	default:
		f.fail(w, c, 404, "not served by the fake")
	}
}

func (f *fake) novaVersion() obj {
	return obj{"id": "v2.1", "status": "CURRENT", "version": "2.96", "min_version": "2.1",
		"updated": "2013-07-23T11:33:21Z",
		"links":   []any{obj{"rel": "self", "href": f.base + "/compute/v2.1/"}}}
}

// view renders a server as Nova does now, BUILD until its build time is up.
func (f *fake) view(s *server) obj {
	out := obj{}
	for k, v := range s.body {
		out[k] = v
	}
	status := "BUILD"
	if time.Since(s.created) >= f.build && !(s.stuck && f.faults.ServerBuildStuck) {
		status = s.fate
	}
	out["status"] = status
	if status == "ERROR" {
		out["fault"] = obj{"code": 500, "message": "No valid host was found. (injected by fake-openstack)",
			"created": time.Now().UTC().Format(time.RFC3339)}
	}
	return out
}

func (f *fake) servers_(w http.ResponseWriter, r *http.Request, c *call) {
	p := c.parts
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case len(p) == 1 && r.Method == http.MethodPost:
		req, _ := c.body["server"].(obj)
		if req == nil {
			f.fail(w, c, 400, "no server in body")
			return
		}
		id := f.newID()
		zone, _ := req["availability_zone"].(string)
		if zone == "" {
			zone = f.zones[0]
		}
		fate := "ACTIVE"
		if f.faults.ServerError > 0 && (f.faults.ServerErrorZone == "" || f.faults.ServerErrorZone == zone) &&
			f.rng.Float64() < f.faults.ServerError {
			fate = "ERROR"
		}
		now := time.Now().UTC().Format(time.RFC3339)
		addresses := obj{}
		if nets, ok := req["networks"].([]any); ok {
			for _, n := range nets {
				portID, _ := n.(obj)["port"].(string)
				port := f.neutron["ports"][portID]
				if port == nil {
					continue
				}
				port["device_id"] = id
				port["device_owner"] = "compute:" + zone
				netName := "net"
				if nw := f.neutron["networks"][port["network_id"].(string)]; nw != nil {
					netName = nw["name"].(string)
				}
				for _, ip := range port["fixed_ips"].([]any) {
					addresses[netName] = append(asList(addresses[netName]), obj{
						"addr": ip.(obj)["ip_address"], "version": 4, "OS-EXT-IPS:type": "fixed",
						"OS-EXT-IPS-MAC:mac_addr": port["mac_address"]})
				}
			}
		}
		metadata := req["metadata"]
		if metadata == nil {
			metadata = obj{}
		}
		tags := req["tags"]
		if tags == nil {
			tags = []any{}
		}
		stuck := f.faults.ServerBuildStuck && (f.faults.ServerBuildStuckZone == "" || f.faults.ServerBuildStuckZone == zone)
		f.servers[id] = &server{created: time.Now(), fate: fate, stuck: stuck, body: obj{
			"id": id, "name": req["name"], "tenant_id": ProjectID, "user_id": "u-capo",
			"hostId": "fakehost", "created": now, "updated": now, "addresses": addresses,
			"metadata": metadata, "tags": tags, "key_name": req["key_name"],
			"image":                       obj{"id": req["imageRef"]},
			"flavor":                      obj{"id": req["flavorRef"], "original_name": "m1.small"},
			"OS-EXT-AZ:availability_zone": zone, "OS-EXT-STS:vm_state": "active",
			"security_groups": []any{obj{"name": "default"}}, "progress": 0,
			"links": []any{obj{"rel": "self", "href": f.base + "/compute/v2.1/servers/" + id}},
		}}
		reply(w, 202, obj{"server": obj{"id": id, "adminPass": "fake", "OS-DCF:diskConfig": "MANUAL",
			"security_groups": []any{obj{"name": "default"}},
			"links":           []any{obj{"rel": "self", "href": f.base + "/compute/v2.1/servers/" + id}}}})
	case len(p) == 1 || (len(p) == 2 && p[1] == "detail"):
		var all []obj
		for _, s := range f.servers {
			all = append(all, f.view(s))
		}
		sort.Slice(all, func(i, j int) bool { return all[i]["id"].(string) < all[j]["id"].(string) })
		reply(w, 200, obj{"servers": filter(all, r, map[string]bool{"name": true})})
	default:
		s := f.servers[p[1]]
		if s == nil {
			f.fail(w, c, 404, "Instance "+p[1]+" could not be found.")
			return
		}
		switch {
		case len(p) == 2 && r.Method == http.MethodGet:
			reply(w, 200, obj{"server": f.view(s)})
		case len(p) == 2 && r.Method == http.MethodDelete:
			delete(f.servers, p[1])
			for _, port := range f.neutron["ports"] {
				if port["device_id"] == p[1] {
					port["device_id"] = ""
					port["device_owner"] = ""
				}
			}
			w.WriteHeader(204)
		case len(p) == 3 && p[2] == "os-interface":
			var ifs []any
			for _, port := range f.neutron["ports"] {
				if port["device_id"] == p[1] {
					ifs = append(ifs, obj{"port_id": port["id"], "net_id": port["network_id"],
						"mac_addr": port["mac_address"], "port_state": "ACTIVE", "fixed_ips": port["fixed_ips"]})
				}
			}
			reply(w, 200, obj{"interfaceAttachments": orEmpty(ifs)})
		case len(p) == 3 && p[2] == "action":
			reply(w, 200, obj{"output": "fake console\n"})
		default:
			f.fail(w, c, 404, "not served by the fake")
		}
	}
}

// ---- Neutron ----

var singular = map[string]string{
	"networks": "network", "subnets": "subnet", "ports": "port", "security-groups": "security_group",
	"security-group-rules": "security_group_rule", "trunks": "trunk", "floatingips": "floatingip",
	"routers": "router",
}

func (f *fake) network(w http.ResponseWriter, r *http.Request, c *call) {
	p := c.parts
	if c.resource == "versions" || c.resource == "version" {
		reply(w, 200, obj{"versions": []any{obj{"id": "v2.0", "status": "CURRENT",
			"links": []any{obj{"rel": "self", "href": f.base + "/network/v2.0/"}}}}})
		return
	}
	if c.resource == "extensions" {
		reply(w, 200, obj{"extensions": []any{
			obj{"alias": "standard-attr-tag", "name": "Tag support", "description": "", "links": []any{}, "updated": "2017-01-01T00:00:00-00:00"},
		}})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	coll, ok := f.neutron[c.resource]
	one := singular[c.resource]
	if !ok {
		f.fail(w, c, 404, "The resource could not be found.")
		return
	}
	listKey := strings.ReplaceAll(c.resource, "-", "_")
	switch {
	case len(p) == 1 && r.Method == http.MethodGet:
		var all []obj
		for _, o := range coll {
			all = append(all, o)
		}
		sort.Slice(all, func(i, j int) bool { return all[i]["id"].(string) < all[j]["id"].(string) })
		reply(w, 200, obj{listKey: filter(all, r, nil)})
	case len(p) == 1 && r.Method == http.MethodPost:
		req, _ := c.body[one].(obj)
		if req == nil {
			f.fail(w, c, 400, "no "+one+" in body")
			return
		}
		o := f.newNeutron(c.resource, req)
		coll[o["id"].(string)] = o
		reply(w, 201, obj{one: o})
	default:
		o := coll[p[1]]
		if o == nil {
			f.fail(w, c, 404, fmt.Sprintf("%s %s could not be found.", one, p[1]))
			return
		}
		switch {
		case len(p) == 2 && r.Method == http.MethodGet:
			reply(w, 200, obj{one: o})
		case len(p) == 2 && r.Method == http.MethodPut:
			if req, ok := c.body[one].(obj); ok {
				for k, v := range req {
					o[k] = v
				}
			}
			reply(w, 200, obj{one: o})
		case len(p) == 2 && r.Method == http.MethodDelete:
			delete(coll, p[1])
			w.WriteHeader(204)
		case len(p) == 3 && p[2] == "tags" && r.Method == http.MethodPut:
			o["tags"] = orEmptyAny(c.body["tags"])
			reply(w, 200, obj{"tags": o["tags"]})
		case len(p) == 3 && p[2] == "tags" && r.Method == http.MethodGet:
			reply(w, 200, obj{"tags": o["tags"]})
		case len(p) == 3 && p[2] == "get_subports":
			reply(w, 200, obj{"sub_ports": []any{}})
		default:
			f.fail(w, c, 404, "not served by the fake")
		}
	}
}

func (f *fake) newNeutron(resource string, req obj) obj {
	now := time.Now().UTC().Format(time.RFC3339)
	o := obj{"id": f.newID(), "tenant_id": ProjectID, "project_id": ProjectID, "tags": []any{},
		"description": "", "created_at": now, "updated_at": now, "name": "", "revision_number": 1}
	for k, v := range req {
		o[k] = v
	}
	if resource == "ports" {
		f.nextIP++
		ips := []any{}
		for _, fi := range asList(req["fixed_ips"]) {
			m, _ := fi.(obj)
			sub, _ := m["subnet_id"].(string)
			if sub == "" {
				sub = SubnetID
			}
			ips = append(ips, obj{"subnet_id": sub, "ip_address": fmt.Sprintf("10.6.%d.%d", f.nextIP/250, 10+f.nextIP%250)})
		}
		if len(ips) == 0 {
			ips = append(ips, obj{"subnet_id": SubnetID, "ip_address": fmt.Sprintf("10.6.%d.%d", f.nextIP/250, 10+f.nextIP%250)})
		}
		o["fixed_ips"] = ips
		o["mac_address"] = fmt.Sprintf("fa:16:3e:00:%02x:%02x", (f.nextIP/256)%256, f.nextIP%256)
		o["status"] = "ACTIVE"
		o["admin_state_up"] = true
		o["allowed_address_pairs"] = orEmptyAny(req["allowed_address_pairs"])
		o["security_groups"] = orEmptyAny(req["security_groups"])
		for _, k := range []string{"device_id", "device_owner"} {
			if _, ok := o[k]; !ok {
				o[k] = ""
			}
		}
	}
	return o
}

// ---- Glance ----

func (f *fake) image(w http.ResponseWriter, r *http.Request, c *call) {
	p := c.parts
	switch {
	case c.resource == "versions" || c.resource == "version":
		reply(w, 300, obj{"versions": []any{obj{"id": "v2.16", "status": "CURRENT",
			"links": []any{obj{"rel": "self", "href": f.base + "/image/v2/"}}}}})
	case c.resource == "images" && len(p) == 1 && r.Method == http.MethodGet:
		f.mu.Lock()
		defer f.mu.Unlock()
		reply(w, 200, obj{"images": filter(f.images, r, nil), "schema": "/v2/schemas/images", "first": "/v2/images"})
	case c.resource == "images" && len(p) == 2 && r.Method == http.MethodGet:
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, im := range f.images {
			if im["id"] == p[1] {
				reply(w, 200, im)
				return
			}
		}
		f.fail(w, c, 404, "No image found with ID "+p[1])
	default:
		f.fail(w, c, 404, "not served by the fake")
	}
}

// ---- list filters ----

// ignored query parameters: paging, sorting and field selection.
var ignored = map[string]bool{"limit": true, "marker": true, "sort_key": true, "sort_dir": true,
	"fields": true, "page_reverse": true, "sort": true, "all_tenants": true}

// filter keeps the objects every query parameter matches: equal as text,
// "tags" (all of) and "not-tags" (none of) against the tags list, a regexp
// for the keys in regex (Nova's server name).
func filter(all []obj, r *http.Request, regex map[string]bool) []obj {
	out := []obj{}
next:
	for _, o := range all {
		for k, vals := range r.URL.Query() {
			if ignored[k] || len(vals) == 0 {
				continue
			}
			v := vals[0]
			switch {
			case k == "tags" || k == "tags-any" || k == "not-tags" || k == "not-tags-any":
				have := map[string]bool{}
				for _, t := range asList(o["tags"]) {
					have[fmt.Sprint(t)] = true
				}
				want := strings.Split(v, ",")
				all, any := true, false
				for _, t := range want {
					all = all && have[t]
					any = any || have[t]
				}
				if (k == "tags" && !all) || (k == "tags-any" && !any) || (k == "not-tags" && all) || (k == "not-tags-any" && any) {
					continue next
				}
			case regex[k]:
				re, err := regexp.Compile(v)
				if err != nil || !re.MatchString(fmt.Sprint(o[k])) {
					continue next
				}
			default:
				have, ok := o[k]
				if !ok {
					continue // a filter the fake does not model matches all
				}
				if list, isList := have.([]any); isList {
					found := false
					for _, x := range list {
						found = found || fmt.Sprint(x) == v
					}
					if !found {
						continue next
					}
				} else if fmt.Sprint(have) != v {
					continue next
				}
			}
		}
		out = append(out, o)
	}
	return out
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func orEmpty(v []any) []any {
	if v == nil {
		return []any{}
	}
	return v
}

func orEmptyAny(v any) any {
	if v == nil {
		return []any{}
	}
	return v
}

// ---- admin and metrics ----

func (f *fake) admin(w http.ResponseWriter, r *http.Request, what string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case what == "faults" && r.Method == http.MethodGet:
		reply(w, 200, f.faults)
	case what == "faults" && r.Method == http.MethodPut:
		var nf Faults
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&nf); err != nil {
			reply(w, 400, obj{"error": err.Error()})
			return
		}
		f.faults = nf
		log.Printf("faults set: %+v", nf)
		reply(w, 200, f.faults)
	case what == "faults" && r.Method == http.MethodDelete:
		f.faults = Faults{}
		log.Printf("faults cleared")
		w.WriteHeader(204)
	case what == "state" && r.Method == http.MethodGet:
		var ss []obj
		for _, s := range f.servers {
			ss = append(ss, f.view(s))
		}
		var ps []obj
		for _, p := range f.neutron["ports"] {
			ps = append(ps, p)
		}
		reply(w, 200, obj{"servers": orEmptyObjs(ss), "ports": orEmptyObjs(ps)})
	default:
		reply(w, 404, obj{"error": "unknown admin call"})
	}
}

func orEmptyObjs(v []obj) []obj {
	if v == nil {
		return []obj{}
	}
	return v
}

func (f *fake) metrics(w http.ResponseWriter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b bytes.Buffer
	b.WriteString("# HELP fake_openstack_requests_total API calls the fake answered, by service, method and status.\n")
	b.WriteString("# TYPE fake_openstack_requests_total counter\n")
	var keys [][3]string
	for k := range f.counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return strings.Join(keys[i][:], " ") < strings.Join(keys[j][:], " ") })
	for _, k := range keys {
		fmt.Fprintf(&b, "fake_openstack_requests_total{service=%q,method=%q,status=%q} %d\n", k[0], k[1], k[2], f.counts[k])
	}
	b.WriteString("# HELP fake_openstack_resource_requests_total The same calls, also by resource (first path segment: servers, ports, ...).\n")
	b.WriteString("# TYPE fake_openstack_resource_requests_total counter\n")
	var dk [][4]string
	for k := range f.detailed {
		dk = append(dk, k)
	}
	sort.Slice(dk, func(i, j int) bool { return strings.Join(dk[i][:], " ") < strings.Join(dk[j][:], " ") })
	for _, k := range dk {
		fmt.Fprintf(&b, "fake_openstack_resource_requests_total{service=%q,resource=%q,method=%q,status=%q} %d\n", k[0], k[1], k[2], k[3], f.detailed[k])
	}
	b.WriteString("# HELP fake_openstack_servers Servers that exist now, by status.\n")
	b.WriteString("# TYPE fake_openstack_servers gauge\n")
	byStatus := map[string]int{"BUILD": 0, "ACTIVE": 0, "ERROR": 0}
	for _, s := range f.servers {
		byStatus[f.view(s)["status"].(string)]++
	}
	for _, st := range []string{"ACTIVE", "BUILD", "ERROR"} {
		fmt.Fprintf(&b, "fake_openstack_servers{status=%q} %d\n", st, byStatus[st])
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}
