'use strict'

// install()'s options, loaded only when there are some to check (install.js's
// defaults() says why): what code and IO_HYGIENE_* variables ask, validated
// against each module's spec, and, for a second install(), what differs from
// the installation in place. `modules` is install.js's list.
const { resolve } = require('./core/options')
// The error classes load with the first refusal: valid options never need them.
const errors = () => require('./core/errors')

const where = 'install()'

// One precedence, wherever install() is called from: the operator's
// IO_HYGIENE_* variables win for what they set, the code's options fill the
// rest. `names` (per module, the variables set) go into error messages, so a
// refused value names the variable that carried it.
function validate (modules, options, env) {
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
    out[mod.name] = value === false ? false : resolveModule(mod, value, env.names[mod.name])
  }
  return Object.freeze(out)
}

// One module's options, `value` being true or what code and variables asked.
function resolveModule (mod, value, names) {
  const at = `install({ ${mod.name} })${names ? ` with ${names.join(' ')}` : ''}`
  const spec = mod.spec()
  const resolved = resolve(at, spec, value === true ? {} : value)
  // A module without options (kafkajs) is on or off: `true`, as the docs
  // list it, not an empty object.
  const out = Object.keys(spec).length === 0 ? true : resolved
  mod.check?.(out, at)
  return out
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

// What the running modules can still take from a second install()'s options;
// what they took is then in use, and no longer reported as ignored.
// An output the running module cannot take (a registry another monitor holds,
// a provider that throws) is reported with the ignored options, by its error
// code only: a second install() never throws for what it could not add.
function attach (modules, current, resolved) {
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

const ATTACHABLE = new Set(['monitor.registry', 'monitor.statsd', 'monitor.logger', 'monitor.loggerProvider', 'monitor.meterProvider', 'monitor.meter'])

module.exports = { validate, resolveModule, attach, differences }
