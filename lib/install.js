'use strict'

const { getSlot, setSlot, deleteSlot, mayMentionUs } = require('./core/global-slot')
// Validation (and the comparison a second install() makes) loads when there
// is something to check: install() with no options and no IO_HYGIENE_*
// variable takes each module's defaults, resolved when first read (see
// defaults()).
const options = () => require('./install-options')

// The modules install() applies, in this order. Each one has a spec (its
// options, validated before anything is touched) and an apply(cfg) that
// changes process state and returns { value, undo } (`value` may be a
// getter: made at its first read). `cfg` is a function that gives the
// options when install() took the defaults unresolved (see defaults()).
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
    spec: () => require('./dns/options').spec,
    check: (cfg, where) => require('./dns/options').check(cfg, where),
    apply: (cfg) => require('./dns').installDns(cfg),
  },
  // After dns: undici connects through net, which calls the patched dns.lookup.
  {
    name: 'http',
    enabledByDefault: true,
    spec: () => require('./http/options').spec,
    check: (cfg, where) => require('./http/options').check(cfg, where),
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

// What validate() would make of no options and no variable, without loading
// a validator or a module's options at start: each module's defaults,
// resolved and checked at their first read (by the module when it first
// needs them, or by whoever reads handle.options).
const isDefaults = new WeakSet()

function defaults () {
  const out = {}
  for (const mod of modules) {
    let value = mod.enabledByDefault ? null : false
    Object.defineProperty(out, mod.name, { enumerable: true, get: () => (value ??= options().resolveModule(mod, true)) })
  }
  isDefaults.add(out)
  return Object.freeze(out)
}

// No options (install(), install({}), register's call) and no variable.
function nothingAsked (given, env) {
  if (Object.keys(env.options).length > 0) return false
  return given === undefined || (given !== null && typeof given === 'object' && !Array.isArray(given) && Object.keys(given).length === 0)
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
function installFrom (given, origin, how = { preloaded: false }) {
  const env = fromEnv()
  const resolved = nothingAsked(given, env) ? defaults() : options().validate(modules, given, env)
  const current = getSlot(kState)
  if (current) {
    // The defaults again (register, then install() in the application): the
    // same options, nothing to compare.
    if (isDefaults.has(resolved) && isDefaults.has(current.resolved)) return current.handle
    const { attach, differences } = options()
    const refused = attach(modules, current, resolved)
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
      // Defaults not yet resolved: the module is handed the getter, and
      // resolves them when it first needs them.
      const { get, value } = Object.getOwnPropertyDescriptor(resolved, mod.name)
      if (get === undefined ? value === false : !mod.enabledByDefault) {
        mod.off?.()
        handle[mod.name] = null
        continue
      }
      const applied = mod.apply(get ?? value, how)
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

const ALREADY_INSTALLED = 'IO_HYGIENE_ALREADY_INSTALLED'
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
