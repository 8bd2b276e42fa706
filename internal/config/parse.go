package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/lockd/lockd/internal/upstream"
)

// Parse reads a configuration file's contents and the secrets it refers to
// (through src), and validates them. The error wraps ErrInvalid and lists
// every problem, each with its line, the app or client, and the field.
func Parse(data []byte, src Sources) (*Config, error) {
	src = src.withDefaults()
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: the file is longer than %d bytes", ErrInvalid, MaxFileBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: the file is empty", ErrInvalid)
		}
		return nil, fmt.Errorf("%w: not YAML: %v", ErrInvalid, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, fmt.Errorf("%w: line %d: more than one YAML document", ErrInvalid, next.Line)
	case !errors.Is(err, io.EOF):
		return nil, fmt.Errorf("%w: not YAML: %v", ErrInvalid, err)
	}
	p := &parser{src: src}
	c := p.file(&doc)
	if len(p.problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(p.problems, "; "))
	}
	c.Warnings = p.warnings
	return c, nil
}

// parser walks the YAML tree by the schema, collecting problems.
type parser struct {
	src      Sources
	problems []string
	warnings []string
}

func (p *parser) addf(n *yaml.Node, where, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if where != "" {
		msg = where + ": " + msg
	}
	if n != nil && n.Line > 0 {
		msg = "line " + strconv.Itoa(n.Line) + ": " + msg
	}
	p.problems = append(p.problems, msg)
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 8; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// fields returns the values of mapping n by key, reporting keys that are not
// allowed or appear twice. A missing key maps to nothing.
func (p *parser) fields(n *yaml.Node, where string, allowed ...string) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k == nil || k.Kind != yaml.ScalarNode {
			p.addf(n.Content[i], where, "keys must be plain names")
			continue
		}
		known := false
		for _, a := range allowed {
			known = known || k.Value == a
		}
		switch {
		case !known:
			p.addf(k, where, "unknown field %q (want one of %s)", k.Value, strings.Join(allowed, ", "))
		case out[k.Value] != nil:
			p.addf(k, where, "%s: given twice", k.Value)
		default:
			out[k.Value] = v
		}
	}
	return out
}

// str reads an optional string field.
func (p *parser) str(f map[string]*yaml.Node, where, field string) string {
	n := f[field]
	if isNull(n) {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		p.addf(n, where, "%s: must be a string", field)
		return ""
	}
	return n.Value
}

// strs reads an optional list of strings.
func (p *parser) strs(f map[string]*yaml.Node, where, field string) []string {
	n := f[field]
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.addf(n, where, "%s: must be a list of strings", field)
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for i, e := range n.Content {
		e = resolve(e)
		if e == nil || e.Kind != yaml.ScalarNode || e.Tag == "!!null" {
			p.addf(e, where, "%s[%d]: must be a string", field, i)
			continue
		}
		out = append(out, e.Value)
	}
	return out
}

// list returns the items of an optional sequence field.
func (p *parser) list(n *yaml.Node, field string) []*yaml.Node {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.addf(n, "", "%s: must be a list", field)
		return nil
	}
	out := make([]*yaml.Node, len(n.Content))
	for i, e := range n.Content {
		out[i] = resolve(e)
	}
	return out
}

func (p *parser) file(doc *yaml.Node) *Config {
	root := doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			p.addf(nil, "", "the file is empty")
			return nil
		}
		root = root.Content[0]
	}
	root = resolve(root)
	switch {
	case isNull(root):
		p.addf(root, "", "the file is empty")
		return nil
	case root.Kind != yaml.MappingNode:
		p.addf(root, "", "the file must be a mapping with the keys apps and auth")
		return nil
	}
	f := p.fields(root, "", "apps", "auth")
	c := &Config{}
	names := map[string]int{}
	accounts := map[string]int{}
	for i, n := range p.list(f["apps"], "apps") {
		if a, ok := p.app(n, i, names, accounts); ok {
			c.Apps = append(c.Apps, a)
		}
	}
	if n, ok := f["auth"]; ok {
		c.Auth = p.auth(n, names)
	}
	return c
}

// appFields are the keys of an apps entry. "secret" is recognised only to
// refuse it with advice.
var appFields = []string{"name", "provider", "appid", "client_id", "secret_env", "secret_file", "token_api", "api_base",
	"token_url", "scope", "audience", "auth_style", "secret"}

func (p *parser) app(n *yaml.Node, i int, names, accounts map[string]int) (App, bool) {
	where := fmt.Sprintf("apps[%d]", i)
	if n == nil || n.Kind != yaml.MappingNode {
		p.addf(n, where, "must be a mapping with name, provider, appid and secret_env or secret_file")
		return App{}, false
	}
	before := len(p.problems)
	f := p.fields(n, where, appFields...)
	a := App{Name: p.str(f, where, "name")}
	if a.Name != "" {
		where = fmt.Sprintf("apps[%d] %q", i, a.Name)
	}
	a.Provider = p.str(f, where, "provider")
	a.AppID = p.str(f, where, "appid")
	if id := p.str(f, where, "client_id"); id != "" {
		switch {
		case a.Provider != upstream.OAuth2:
			p.addf(f["client_id"], where, "client_id: only for provider %q; set appid", upstream.OAuth2)
		case a.AppID != "":
			p.addf(f["client_id"], where, "client_id and appid: give one, not both")
		default:
			a.AppID = id
		}
	}
	a.SecretEnv = p.str(f, where, "secret_env")
	a.SecretFile = p.str(f, where, "secret_file")
	a.TokenAPI = p.str(f, where, "token_api")
	a.APIBase = p.str(f, where, "api_base")
	a.TokenURL = p.str(f, where, "token_url")
	a.Scope = p.str(f, where, "scope")
	a.Audience = p.str(f, where, "audience")
	a.AuthStyle = p.str(f, where, "auth_style")

	p.name(n, f["name"], where, a.Name)
	if first, dup := names[a.Name]; dup && a.Name != "" {
		p.addf(f["name"], where, "name: also the name of apps[%d]", first)
	} else if a.Name != "" {
		names[a.Name] = i
	}
	if s, ok := f["secret"]; ok {
		// Never echo the value: it is, presumably, the secret.
		p.addf(s, where, "secret: do not put the secret in this file; name an environment variable (secret_env) or a file (secret_file)")
	}
	secret, ok := p.secret(n, f, where, "secret", a.SecretEnv, a.SecretFile)
	a.Secret = Secret(secret)
	check := a.Upstream()
	if !ok {
		check.Secret = "placeholder" // reported already; check the other fields
	}
	if err := check.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), upstream.ErrInvalidConfig.Error()+": ")
		field, _, _ := strings.Cut(msg, " ")
		field = strings.TrimSuffix(field, ":")
		if field == "secret" {
			// Name where the secret came from; wechat names only its position.
			field = "secret_env"
			if a.SecretFile != "" {
				field = "secret_file"
			}
			msg = field + ": the secret " + strings.TrimPrefix(msg, "secret: ")
		}
		switch field {
		case "api_base":
			msg = shownURLProblem(field, msg, a.APIBase)
		case "token_url":
			msg = shownURLProblem(field, msg, a.TokenURL)
		case "appid":
			if f["appid"] == nil && f["client_id"] != nil {
				field, msg = "client_id", "client_id"+strings.TrimPrefix(msg, "appid")
			}
		}
		at := f[field]
		if at == nil {
			at = n
		}
		p.addf(at, where, "%s", msg)
	}
	if len(p.problems) == before {
		p.account(f["appid"], where, a, i, accounts)
	}
	return a, len(p.problems) == before
}

// account refuses a second app of one upstream account: two classic apps
// on one appid invalidate each other's tokens (each mint ends the other's
// token five minutes later), and any two share one token cache in Redis.
// A classic and a stable app on one appid are apart: WeChat keeps their
// tokens separate (so does Feishu for tenant and app tokens). WeCom apps
// of one corp differ by their secret; OAuth2 apps of one client by their
// token_url, scope and audience.
func (p *parser) account(at *yaml.Node, where string, a App, i int, accounts map[string]int) {
	cfg := a.Upstream().WithDefaults()
	key := cfg.Provider + "\x00" + cfg.TokenAPI + "\x00" + cfg.AppID
	switch cfg.Provider {
	case upstream.WeCom:
		key += "\x00" + cfg.Secret
	case upstream.OAuth2:
		key += "\x00" + cfg.TokenURL + "\x00" + cfg.Scope + "\x00" + cfg.Audience
	}
	first, dup := accounts[key]
	if !dup {
		accounts[key] = i
		return
	}
	switch {
	case cfg.Provider == upstream.WeChat && cfg.TokenAPI == upstream.TokenAPIClassic:
		p.addf(at, where, "appid: %s is also the classic appid of apps[%d]: each app's mints would end the other's token; configure the account once", a.AppID, first)
	case cfg.Provider == upstream.WeCom:
		p.addf(at, where, "appid: corpid %s with the same secret is also apps[%d]: configure the WeCom app once", a.AppID, first)
	case cfg.Provider == upstream.OAuth2:
		p.addf(at, where, "client_id: %s with the same token_url, scope and audience is also apps[%d]: configure it once", a.AppID, first)
	case cfg.Provider == upstream.WeChat:
		p.addf(at, where, "appid: %s is also the stable appid of apps[%d]: configure the account once", a.AppID, first)
	default:
		p.addf(at, where, "appid: %s is also the %s %s appid of apps[%d]: configure the account once", a.AppID, cfg.Provider, cfg.TokenAPI, first)
	}
}

// name checks an app or client name.
func (p *parser) name(entry, at *yaml.Node, where, name string) {
	if at == nil {
		at = entry
	}
	switch {
	case name == "":
		p.addf(at, where, "name: missing")
	case len(name) > MaxNameBytes:
		p.addf(at, where, "name: longer than %d bytes", MaxNameBytes)
	default:
		for i, r := range name {
			if !validNameRune(r) || (i == 0 && (r == '.' || r == '_' || r == '-')) {
				p.addf(at, where, "name: want letters, digits, '.', '_' or '-', starting with a letter or digit")
				return
			}
		}
	}
}

func validNameRune(r rune) bool {
	return r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
}

// secret reads a secret from exactly one of env and file, reporting
// problems with field names what+"_env" and what+"_file". It never puts the
// secret in a problem, nor a variable name or path that looks like one
// (see secretShaped): a user may have pasted the secret there.
// relativeTo tells, for a relative path, the directory it is taken
// relative to; "" for an absolute one.
func relativeTo(path, dir string) string {
	if filepath.IsAbs(path) || dir == "" {
		return ""
	}
	return " (relative to " + dir + ")"
}

func (p *parser) secret(entry *yaml.Node, f map[string]*yaml.Node, where, what, env, file string) (string, bool) {
	envField, fileField := what+"_env", what+"_file"
	switch {
	case env != "" && file != "":
		p.addf(f[fileField], where, "%s and %s: give one, not both", envField, fileField)
		return "", false
	case env != "":
		shown := "environment variable " + env
		if secretShaped(env) {
			shown = "the environment variable named there (not shown: it looks like a secret; name the variable, not its value)"
		}
		if !envName(env) {
			p.addf(f[envField], where, "%s: not an environment variable name (letters, digits and '_'); name the variable holding the %s, not the %s itself", envField, what, what)
			return "", false
		}
		v, ok := p.src.LookupEnv(env)
		switch {
		case !ok:
			p.addf(f[envField], where, "%s: %s is not set", envField, shown)
			return "", false
		case v == "":
			p.addf(f[envField], where, "%s: %s is empty", envField, shown)
			return "", false
		}
		return v, true
	case file != "":
		path := p.src.path(file)
		shown := path
		if secretShaped(file) {
			shown = "the file named there (not shown: its name looks like a secret; name the file, not its contents)"
		}
		data, err := p.src.ReadFile(path)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the path is shown below, when it may be
			}
			if errors.Is(err, errTooLong) {
				p.addf(f[fileField], where, "%s: %s is longer than %d bytes", fileField, shown, MaxSecretFileBytes)
			} else {
				// A file that cannot be read may be no file at all but a
				// pasted secret, whatever its shape: its name is never
				// shown, only where it is written.
				p.addf(f[fileField], where, "%s: the file named there%s cannot be read: %v", fileField, relativeTo(file, p.src.Dir), err)
			}
			return "", false
		}
		v := strings.TrimRight(string(data), "\r\n")
		if v == "" {
			p.addf(f[fileField], where, "%s: %s is empty", fileField, shown)
			return "", false
		}
		if perm, open := openToOthers(p.src.Stat, path); open {
			p.warnings = append(p.warnings, where+": "+fileField+": "+OpenToOthersWarning(shown, perm))
		}
		return v, true
	}
	p.addf(entry, where, "%s or %s: missing", envField, fileField)
	return "", false
}

// clientFields are the keys of an auth.clients entry; "token" is
// recognised only to refuse it with advice.
var clientFields = []string{"name", "token_env", "token_file", "locks", "apps", "limits", "admin", "tls_subject", "token"}

// MaxTLSSubjectBytes bounds a client's tls_subject.
const MaxTLSSubjectBytes = 1024

// limitFields are the keys of a client's limits.
var limitFields = []string{"waiters", "keepalives", "watches", "leases", "connections", "refreshes_per_hour"}

func (p *parser) auth(n *yaml.Node, apps map[string]int) *Auth {
	const empty = "auth: no clients; list them, or remove auth to turn authentication off"
	if isNull(n) {
		p.addf(n, "", empty)
		return &Auth{}
	}
	if n.Kind != yaml.MappingNode {
		p.addf(n, "", "auth: must be a mapping with clients")
		return &Auth{}
	}
	f := p.fields(n, "auth", "clients")
	items := p.list(f["clients"], "auth.clients")
	if len(items) == 0 {
		p.addf(n, "", empty)
	}
	a := &Auth{}
	names := map[string]int{}
	tokens := map[string]string{}
	for i, cn := range items {
		c, ok := p.client(cn, i, names, apps)
		if !ok {
			continue
		}
		if other, dup := tokens[string(c.Token)]; dup {
			p.addf(cn, fmt.Sprintf("auth.clients[%d] %q", i, c.Name), "token: the same as client %q's; give each client its own", other)
			continue
		}
		tokens[string(c.Token)] = c.Name
		a.Clients = append(a.Clients, c)
	}
	p.warnings = append(p.warnings, prefixWarnings(a.Clients)...)
	return a
}

// boolean reads an optional true/false field.
func (p *parser) boolean(f map[string]*yaml.Node, where, field string) bool {
	n := f[field]
	if isNull(n) {
		return false
	}
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		p.addf(n, where, "%s: must be true or false", field)
		return false
	}
	return v
}

// count reads an optional whole number of at least 0.
func (p *parser) count(f map[string]*yaml.Node, where, field string) int {
	n := f[field]
	if isNull(n) {
		return 0
	}
	var v int
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil || v < 0 || v > MaxLimit {
		p.addf(n, where, "%s: must be a whole number from 0 to %d", field, MaxLimit)
		return 0
	}
	return v
}

// limits reads a client's optional limits mapping.
func (p *parser) limits(n *yaml.Node, where string) Limits {
	if isNull(n) {
		return Limits{}
	}
	if n.Kind != yaml.MappingNode {
		p.addf(n, where, "limits: must be a mapping with %s", strings.Join(limitFields, ", "))
		return Limits{}
	}
	where += ": limits"
	f := p.fields(n, where, limitFields...)
	return Limits{
		Waiters:          p.count(f, where, "waiters"),
		KeepAlives:       p.count(f, where, "keepalives"),
		Watches:          p.count(f, where, "watches"),
		Leases:           p.count(f, where, "leases"),
		Connections:      p.count(f, where, "connections"),
		RefreshesPerHour: p.count(f, where, "refreshes_per_hour"),
	}
}

func (p *parser) client(n *yaml.Node, i int, names, apps map[string]int) (Client, bool) {
	where := fmt.Sprintf("auth.clients[%d]", i)
	if n == nil || n.Kind != yaml.MappingNode {
		p.addf(n, where, "must be a mapping with name, token_env or token_file, locks and apps")
		return Client{}, false
	}
	before := len(p.problems)
	f := p.fields(n, where, clientFields...)
	c := Client{Name: p.str(f, where, "name")}
	if c.Name != "" {
		where = fmt.Sprintf("auth.clients[%d] %q", i, c.Name)
	}
	c.TokenEnv = p.str(f, where, "token_env")
	c.TokenFile = p.str(f, where, "token_file")
	c.Locks = p.strs(f, where, "locks")
	c.Apps = p.strs(f, where, "apps")
	c.Admin = p.boolean(f, where, "admin")
	c.Limits = p.limits(f["limits"], where)
	c.TLSSubject = p.str(f, where, "tls_subject")
	if _, set := f["tls_subject"]; set {
		switch {
		case c.TLSSubject == "":
			p.addf(f["tls_subject"], where, "tls_subject: must not be empty (leave it out to accept any certificate)")
		case len(c.TLSSubject) > MaxTLSSubjectBytes:
			p.addf(f["tls_subject"], where, "tls_subject: longer than %d bytes", MaxTLSSubjectBytes)
		case !utf8.ValidString(c.TLSSubject) || strings.IndexFunc(c.TLSSubject, unicode.IsControl) >= 0:
			p.addf(f["tls_subject"], where, "tls_subject: must be valid UTF-8 without control characters")
		}
	}

	p.name(n, f["name"], where, c.Name)
	if first, dup := names[c.Name]; dup && c.Name != "" {
		p.addf(f["name"], where, "name: also the name of auth.clients[%d]", first)
	} else if c.Name != "" {
		names[c.Name] = i
	}
	if t, ok := f["token"]; ok {
		p.addf(t, where, "token: do not put the token in this file; name an environment variable (token_env) or a file (token_file)")
	}
	if tok, ok := p.secret(n, f, where, "token", c.TokenEnv, c.TokenFile); ok {
		field := "token_env"
		if c.TokenFile != "" {
			field = "token_file"
		}
		if len(tok) < MinClientTokenBytes {
			p.addf(f[field], where, "%s: the token is %d bytes, shorter than %d", field, len(tok), MinClientTokenBytes)
		} else if i := strings.IndexFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }); i >= 0 {
			p.addf(f[field], where, "%s: the token has a space, control or non-ASCII character at byte %d of %d", field, i, len(tok))
		}
		c.Token = Secret(tok)
	}
	for j, prefix := range c.Locks {
		switch {
		case len(prefix) > MaxLockPrefixBytes:
			p.addf(f["locks"], where, "locks[%d]: longer than %d bytes", j, MaxLockPrefixBytes)
		case !utf8.ValidString(prefix):
			p.addf(f["locks"], where, "locks[%d]: not valid UTF-8", j)
		case strings.IndexFunc(prefix, unicode.IsControl) >= 0:
			p.addf(f["locks"], where, "locks[%d]: has a control character", j)
		}
	}
	for j, app := range c.Apps {
		if _, ok := apps[app]; !ok {
			p.addf(f["apps"], where, "apps[%d]: %q is not the name of an app in apps", j, app)
		}
	}
	return c, len(p.problems) == before
}
