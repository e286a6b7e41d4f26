'use strict'

const { getSlot, setSlot, deleteSlot } = require('./core/global-slot')
const { resolve, mayMentionUs } = require('./core/options')
// The error classes load with the first refusal: valid options never need them.
const errors = () => require('./core/errors')

// The modules install() applies, in this order. Each one has a spec (its
// options, validated before anything is touched) and an apply(cfg) that
// changes process state and returns { value, undo } (`value` may be a
// getter: made at its first read).
const modules = [
  // First, and cheap: kafkajs's producer captures the files it corrects when
  // it loads, so they must be in place before the application requires it.
  {
    name: 'kafkajs',
    enabledByDefault: true,
    spec: () => ({}),
    apply: () => require('./kafka/kafkajs-patch').applyKafkajsPatch(),
    // Turned off: wrapProducer() must not patch it later either.
    off: () => require('./kafka/kafkajs-patch').turnOffKafkajsPatch(),
  },
  {
    name: 'dns',
    enabledByDefault: true,
    spec: () => require('./dns').spec,
    check: (cfg, where) => require('./dns').check(cfg, where),
    apply: (cfg) => require('./dns').installDns(cfg),
  },
  // After dns: undici connects through net, which calls the patched dns.lookup.
  {
    name: 'http',
    enabledByDefault: true,
    spec: () => require('./http').spec,
    check: (cfg, where) => require('./http').check(cfg, where),
    apply: (cfg) => require('./http').installHttp(cfg),
  },
  // Last, so that it samples a process whose other modules are in place.
  {
    name: 'monitor',
    enabledByDefault: false,
    spec: () => require('./monitor').spec,
    check: (cfg, where) => require('./monitor').check(cfg, where),
    apply: (cfg, how) => require('./monitor').installMonitor(cfg, how),
    // A second install() hands the running monitor the outputs no variable
    // can carry (a registry, a StatsD client, a logger): one sampler, fed.
    attach: (monitor, asked) => require('./monitor').attachOutputs(monitor, asked),
  },
]

const kState = Symbol.for('io-hygiene.install.v1')
const where = 'install()'

// One precedence, wherever install() is called from: the operator's
// IO_HYGIENE_* variables win for what they set, the code's options fill the
// rest. `names` (per module, the variables set) go into error messages, so a
// refused value names the variable that carried it.
function validate (options, env) {
  if (options === undefined) options = {}
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new (errors().ERR_IO_HYGIENE_INVALID_OPTION)(where, 'options', 'an object', options)
  }
  const spec = {}
  for (const mod of modules) {
    spec[mod.name] = { default: mod.enabledByDefault, check: moduleOptions(mod) }
  }
  const top = resolve(where, spec, options)
  const out = {}
  for (const mod of modules) {
    const value = merge(top[mod.name], env.options[mod.name])
    if (value === false) {
      out[mod.name] = false
      continue
    }
    const names = env.names[mod.name]
    const at = `install({ ${mod.name} })${names ? ` with ${names.join(' ')}` : ''}`
    const spec = mod.spec()
    const resolved = resolve(at, spec, value === true ? {} : value)
    // A module without options (kafkajs) is on or off: `true`, as the docs
    // list it, not an empty object.
    out[mod.name] = Object.keys(spec).length === 0 ? true : resolved
    mod.check?.(out[mod.name], at)
  }
  return Object.freeze(out)
}

// A module's options from code and from the environment. The environment
// turns a module off with IO_HYGIENE_<MODULE>=0, and on with =1 or by setting
// any of its variables; otherwise code decides.
function merge (code, fromEnv) {
  if (fromEnv === undefined) return code
  if (fromEnv === false) return false
  return { ...(typeof code === 'object' ? code : {}), ...fromEnv }
}

function moduleOptions (mod) {
  return (_, key, value) => {
    if (typeof value === 'boolean') return value
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw new (errors().ERR_IO_HYGIENE_INVALID_OPTION)(where, key, 'a boolean or an options object', value)
    }
    return value
  }
}

// The environment's options. env.js, which reads them, loads only when some
// variable may be one.
function fromEnv () {
  if (!mayMentionUs()) return { options: Object.create(null), names: Object.create(null) }
  return require('./env').readEnv(modules)
}

function install (options) {
  return installFrom(options, 'an earlier install()')
}

// `how.preloaded`: installed by io-hygiene/register, before the application
// loaded (so its advice never says to load it that way).

// A second install() never fails a service that is already installed (say by
// `node -r io-hygiene/register`, then install() in the app's code): it returns
// the installation in place, as dd-trace's init() does, and if its options
// differ, says once which were ignored. Bad options still throw.
function installFrom (options, origin, how = { preloaded: false }) {
  const resolved = validate(options, fromEnv())
  const current = getSlot(kState)
  if (current) {
    const refused = attach(current, resolved)
    const ignored = [...refused, ...differences(current.resolved, resolved)]
    if (ignored.length > 0) warnIgnored(current.origin, ignored)
    return current.handle
  }

  const undos = []
  // stats(): every installed module's own stats() (the monitor's holds its
  // latest sample), null for a module that is off.
  const handle = { options: resolved, uninstall, stats: () => Object.fromEntries(modules.map((mod) => [mod.name, handle[mod.name]?.stats?.() ?? null])) }
  try {
    for (const mod of modules) {
      if (resolved[mod.name] === false) {
        mod.off?.()
        handle[mod.name] = null
        continue
      }
      const applied = mod.apply(resolved[mod.name], how)
      undos.push(applied.undo)
      setValue(handle, mod.name, applied)
    }
  } catch (err) {
    for (const undo of undos.reverse()) undo()
    throw err
  }
  setSlot(kState, { resolved, handle, undos, origin })
  return handle
}

// A module's value on the handle. One made at its first read (the dns
// cache, made at the first lookup) stays unmade until someone asks for it.
function setValue (handle, name, applied) {
  const { get, value } = Object.getOwnPropertyDescriptor(applied, 'value')
  if (get === undefined) {
    handle[name] = value
    return
  }
  Object.defineProperty(handle, name, {
    enumerable: true,
    configurable: true,
    get () {
      const made = get.call(applied)
      Object.defineProperty(handle, name, { value: made, writable: true, enumerable: true, configurable: true })
      return made
    },
  })
}

// What the running modules can still take from a second install()'s options;
// what they took is then in use, and no longer reported as ignored.
// An output the running module cannot take (a registry another monitor holds,
// a provider that throws) is reported with the ignored options, by its error
// code only: a second install() never throws for what it could not add.
function attach (current, resolved) {
  let changed = false
  const refused = []
  const now = { ...current.resolved }
  for (const mod of modules) {
    if (mod.attach === undefined) continue
    const value = current.handle[mod.name]
    if (!value || !resolved[mod.name]) continue
    let inUse
    try {
      inUse = mod.attach(value, resolved[mod.name])
    } catch (err) {
      const code = typeof err?.code === 'string' && /^[A-Z][A-Z0-9_]{0,63}$/.test(err.code) ? err.code : 'an error'
      refused.push(`${mod.name} outputs (not attached: ${code})`)
      continue
    }
    if (inUse !== now[mod.name]) {
      now[mod.name] = inUse
      changed = true
    }
  }
  if (changed) {
    current.resolved = Object.freeze(now)
    current.handle.options = current.resolved
  }
  return refused
}

// Returns true when every patch was restored to the original; false when some
// other code wrapped a function after us (our wrapper then passes straight
// through to the original instead).
function uninstall () {
  const current = getSlot(kState)
  if (!current) return true
  deleteSlot(kState)
  let restored = true
  for (const undo of current.undos.reverse()) {
    if (undo() === false) restored = false
  }
  return restored
}

function installed () {
  return getSlot(kState)?.handle ?? null
}

// What `b` asks for that the installation `a` does not have, as
// "dns.maxTtlMs (asked 6000, in use 5000)".
function differences (a, b) {
  const out = []
  for (const key of Object.keys(a)) {
    const x = a[key]
    const y = b[key]
    if (x === y) continue
    if (!x || !y) { // one of them is off (false)
      out.push(`${key} (asked ${y ? 'on' : 'off'}, in use ${x ? 'on' : 'off'})`)
      continue
    }
    for (const k of Object.keys(x)) {
      const u = x[k]
      const v = y[k]
      if (u === v) continue
      // An output the caller left unset is not a wish for none: one an
      // earlier call attached stays without a word.
      if (v === null && ATTACHABLE.has(`${key}.${k}`)) continue
      if (sameList(u, v)) continue
      out.push(`${key}.${k} (asked ${show(v)}, in use ${show(u)})`)
    }
  }
  return out
}

// Two lists with the same entries (options are frozen copies); false for
// anything else, a revoked proxy (which throws at any touch) included.
function sameList (u, v) {
  try {
    return Array.isArray(u) && Array.isArray(v) && u.length === v.length && u.every((e, i) => e === v[i])
  } catch {
    return false
  }
}

// A value by its type, never its insides: an object may be a registry full
// of metrics, a logger, or circular (JSON.stringify would throw). Text is
// escaped as error messages escape it; an object that throws at a touch (a
// revoked proxy fails even Array.isArray) is only "an object".
function show (value) {
  if (typeof value === 'function') return 'a function'
  if (typeof value === 'bigint') return `${value}n`
  if (typeof value === 'string') return value.length <= 80 ? errors().printable(JSON.stringify(value)) : 'a string'
  if (value === null || typeof value !== 'object') return String(value)
  try {
    if (!Array.isArray(value)) return 'an object'
    const shown = value.every((v) => typeof v === 'number' || (typeof v === 'string' && v.length <= 80)) ? JSON.stringify(value) : ''
    return shown !== '' && shown.length <= 80 ? errors().printable(shown) : 'an array'
  } catch {
    return 'an object'
  }
}

const ALREADY_INSTALLED = 'IO_HYGIENE_ALREADY_INSTALLED'
const ATTACHABLE = new Set(['monitor.registry', 'monitor.statsd', 'monitor.logger', 'monitor.loggerProvider', 'monitor.meterProvider', 'monitor.meter'])
const warned = new Set()

function warnIgnored (origin, ignored) {
  const message = `install() found io-hygiene already installed by ${origin} and kept that installation; ` +
    `ignored: ${ignored.join(', ')}. Set these once: in one install() call, or in IO_HYGIENE_* variables ` +
    '(which win over code), or call uninstall() before install() to change them.'
  if (warned.has(message)) return
  warned.add(message)
  process.emitWarning(message, { code: ALREADY_INSTALLED, type: 'IoHygieneWarning' })
}

module.exports = { install, installFrom, uninstall, installed, modules, ALREADY_INSTALLED }
