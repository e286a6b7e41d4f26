'use strict'

// Every ERR_IO_HYGIENE_* code lives here, built by one factory so that the
// docs, the types and the tests can check the list against one source.
const codes = {}

// As Node's own errors: `name` is the base class's ("TypeError"), and the
// code shows in the stack ("TypeError [ERR_...]: ...") because the name holds
// it for the moment the stack is formatted. `message` builds the message from
// the constructor's arguments. With `showCause`, the cause's
// message ends the message, so the reason is read where people read.
function createError (code, message, Base = Error, { showCause = false } = {}) {
  class IoHygieneError extends Base {
    constructor (...args) {
      const last = args[args.length - 1]
      const options = last !== null && typeof last === 'object' && 'cause' in last ? args.pop() : undefined
      let text = message(...args)
      if (showCause && options?.cause?.message) text += ` (${options.cause.message})`
      super(text, options)
      this.code = code
      this.name = `${Base.name} [${code}]`
      this.stack // eslint-disable-line no-unused-expressions -- formats the stack with the code in it
      delete this.name
    }

    toString () {
      return `${this.name} [${code}]: ${this.message}`
    }
  }
  Object.defineProperty(IoHygieneError, 'name', { value: code })
  codes[code] = IoHygieneError
  return IoHygieneError
}

const ERR_IO_HYGIENE_UNKNOWN_OPTION = createError(
  'ERR_IO_HYGIENE_UNKNOWN_OPTION',
  (where, key, known, suggestion = null) => suggestion !== null
    ? `${where}: unknown option "${optionName(key)}; did you mean "${suggestion}"?`
    : `${where}: unknown option "${optionName(key)} (known options: ${known.join(', ')})`,
  TypeError
)
const ERR_IO_HYGIENE_INVALID_OPTION = createError(
  'ERR_IO_HYGIENE_INVALID_OPTION',
  (where, key, expected, value) => `${where}: option "${key}" must be ${expected}, got ${describe(value)}`,
  TypeError,
  { showCause: true }
)
const ERR_IO_HYGIENE_OPTION_RANGE = createError(
  'ERR_IO_HYGIENE_OPTION_RANGE',
  (where, key, expected, value) => `${where}: option "${key}" must be ${expected}, got ${describe(value)}`,
  RangeError
)
const ERR_IO_HYGIENE_CONFLICTING_OPTIONS = createError(
  'ERR_IO_HYGIENE_CONFLICTING_OPTIONS',
  (where, detail) => `${where}: ${detail}`,
  TypeError
)
const ERR_IO_HYGIENE_INVALID_ARGUMENT = createError(
  'ERR_IO_HYGIENE_INVALID_ARGUMENT',
  (where, detail) => `${where}: ${detail}`,
  TypeError
)
const ERR_IO_HYGIENE_INVALID_ENV = createError(
  'ERR_IO_HYGIENE_INVALID_ENV',
  (name, expected, value) => `environment variable ${printable(name)} must be ${expected}, got ${printable(JSON.stringify(value))}`,
  TypeError
)
const ERR_IO_HYGIENE_UNKNOWN_ENV = createError(
  'ERR_IO_HYGIENE_UNKNOWN_ENV',
  (name, closest, option) => option
    ? `environment variable ${printable(name)} cannot be read: the ${option.module} option "${option.key}" takes a value no environment variable can carry (an object or a function); pass it in code: install({ ${option.module}: { ${option.key} } })`
    : `unknown environment variable ${printable(name)} (did you mean ${closest}? install() reads IO_HYGIENE_<MODULE> and IO_HYGIENE_<MODULE>_<OPTION>, the option's name in upper snake case)`,
  TypeError
)
const ERR_IO_HYGIENE_QUEUE_FULL = createError(
  'ERR_IO_HYGIENE_QUEUE_FULL',
  (detail) => `queue is full: ${detail}`,
  Error
)
const ERR_IO_HYGIENE_CLOSED = createError(
  'ERR_IO_HYGIENE_CLOSED',
  (what) => `${what} is closed`,
  Error
)
const ERR_IO_HYGIENE_TIMEOUT = createError(
  'ERR_IO_HYGIENE_TIMEOUT',
  (what, ms) => `${what} did not finish within ${ms} ms`,
  Error
)
const ERR_IO_HYGIENE_DELIVERY_TIMEOUT = createError(
  'ERR_IO_HYGIENE_DELIVERY_TIMEOUT',
  (ms) => `not delivered within deliveryTimeoutMs (${ms} ms)`,
  Error
)
const ERR_IO_HYGIENE_NOT_CONNECTED = createError(
  'ERR_IO_HYGIENE_NOT_CONNECTED',
  (what) => `${what} is not connected: call connect() first (nothing was sent)`,
  Error
)
// A kafkajs error that fails a send() for good, kept as `cause`: a wrapper
// per call, so that its `written` says what became of that call's messages.
const ERR_IO_HYGIENE_KAFKA_SEND_FAILED = createError(
  'ERR_IO_HYGIENE_KAFKA_SEND_FAILED',
  (what) => `${what} failed for good`,
  Error,
  { showCause: true }
)
// A producer wrapProducer() refuses: `client` and `why` are ours (which
// client, why not and what to do instead), never the caller's text.
const ERR_IO_HYGIENE_UNSUPPORTED_PRODUCER = createError(
  'ERR_IO_HYGIENE_UNSUPPORTED_PRODUCER',
  (where, client, why) => `${where}: ${client} ${why}`,
  TypeError
)
const ERR_IO_HYGIENE_ITEM_TOO_LARGE = createError(
  'ERR_IO_HYGIENE_ITEM_TOO_LARGE',
  (what, bytes, max) => `${what}: an item of ${bytes} bytes can never fit in a batch of maxBatchBytes ${max}`,
  RangeError
)
const ERR_IO_HYGIENE_INVALID_RESULT = createError(
  'ERR_IO_HYGIENE_INVALID_RESULT',
  (what, detail) => `${what}: ${detail}`,
  TypeError
)
const ERR_IO_HYGIENE_INVALID_CONDITION = createError(
  'ERR_IO_HYGIENE_INVALID_CONDITION',
  (where, condition, detail) => `${where}: condition ${describe(condition)}: ${detail}`,
  TypeError
)
const ERR_IO_HYGIENE_MISSING_PEER = createError(
  'ERR_IO_HYGIENE_MISSING_PEER',
  (where, name) => `${where} needs the optional peer dependency "${name}", which could not be loaded (npm install ${name})`,
  Error
)
const ERR_IO_HYGIENE_ALREADY_REGISTERED = createError(
  'ERR_IO_HYGIENE_ALREADY_REGISTERED',
  (where, detail) => `${where}: ${detail}`,
  Error
)
// An HTTP answer that fails a request for good; `status` and `body` (an
// excerpt) are set on it by its maker.
// Both `what` and the excerpt come from outside: printable only.
const ERR_IO_HYGIENE_HTTP_STATUS = createError(
  'ERR_IO_HYGIENE_HTTP_STATUS',
  (what, status, excerpt) => `${printable(what)} answered ${status}${excerpt ? `: ${printable(excerpt)}` : ''}`,
  Error
)

// Text from outside (a response body, a header) shown in a message: C0 and
// C1 controls, DEL and the bidirectional overrides are escaped, so that a
// newline cannot forge a log line nor an escape sequence drive a terminal.
// The raw text stays on the error's own fields.
// eslint-disable-next-line no-control-regex -- matching them is the point
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g
function printable (text) {
  return String(text).replace(UNPRINTABLE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

// A URL as a message may show it: no credentials, no query string (API
// keys travel there), no fragment.
function redactUrl (url) {
  let u
  try {
    u = new URL(url)
  } catch {
    return '<invalid URL>'
  }
  const redacted = u.username !== '' || u.password !== '' ? '<redacted>@' : ''
  const query = u.search !== '' ? '?<redacted>' : ''
  return `${u.protocol}//${redacted}${u.host}${u.pathname}${query}`
}

// An option's name as the caller wrote it (from a config file, say), closing
// quote included: escaped, and cut when it is too long to be a typo.
function optionName (key) {
  return key.length <= 80 ? `${printable(key)}"` : `${printable(key.slice(0, 40))}…" (${key.length} characters)`
}

// What a message says in place of a value it must not show (a header that
// may carry a token, a URL that may carry a key): withheld('a URL with
// credentials') reads "got a URL with credentials".
class Withheld {
  constructor (description) {
    this.description = description
  }
}
const withheld = (description) => new Withheld(description)

function describe (value) {
  if (value instanceof Withheld) return value.description
  if (typeof value === 'string') {
    return value.length <= 200 ? printable(JSON.stringify(value)) : `${printable(JSON.stringify(value.slice(0, 100)).slice(0, -1))}…" (${value.length} characters)`
  }
  if (typeof value === 'bigint') return `${value}n`
  if (value === null || typeof value !== 'object') return String(value)
  if (!Array.isArray(value)) return 'an object'
  // A short array of strings and numbers is shown: the bad entry is in it.
  const shown = value.every((v) => typeof v === 'string' || typeof v === 'number') ? JSON.stringify(value) : ''
  return shown !== '' && shown.length <= 80 ? printable(shown) : 'an array'
}

module.exports = {
  codes,
  createError,
  describe,
  printable,
  redactUrl,
  withheld,
  ERR_IO_HYGIENE_UNKNOWN_OPTION,
  ERR_IO_HYGIENE_INVALID_OPTION,
  ERR_IO_HYGIENE_OPTION_RANGE,
  ERR_IO_HYGIENE_CONFLICTING_OPTIONS,
  ERR_IO_HYGIENE_INVALID_ARGUMENT,
  ERR_IO_HYGIENE_INVALID_ENV,
  ERR_IO_HYGIENE_UNKNOWN_ENV,
  ERR_IO_HYGIENE_QUEUE_FULL,
  ERR_IO_HYGIENE_CLOSED,
  ERR_IO_HYGIENE_TIMEOUT,
  ERR_IO_HYGIENE_DELIVERY_TIMEOUT,
  ERR_IO_HYGIENE_NOT_CONNECTED,
  ERR_IO_HYGIENE_KAFKA_SEND_FAILED,
  ERR_IO_HYGIENE_UNSUPPORTED_PRODUCER,
  ERR_IO_HYGIENE_ITEM_TOO_LARGE,
  ERR_IO_HYGIENE_INVALID_RESULT,
  ERR_IO_HYGIENE_MISSING_PEER,
  ERR_IO_HYGIENE_INVALID_CONDITION,
  ERR_IO_HYGIENE_HTTP_STATUS,
  ERR_IO_HYGIENE_ALREADY_REGISTERED,
}
