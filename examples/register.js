'use strict'

// `node examples/register.js`: the `node -r io-hygiene/register` form, which
// installs io-hygiene before the application's first line runs, configured by
// IO_HYGIENE_* environment variables instead of code. This file runs itself
// twice that way and prints what each run saw:
//
//   node -r io-hygiene/register examples/register.js
//   IO_HYGIENE_DNS=0 node -r io-hygiene/register examples/register.js
//
// and a third time with a value that does not parse, which stops the process
// at start-up with ERR_IO_HYGIENE_INVALID_ENV rather than run misconfigured.
//
// The application below does what many client libraries do: it takes
// `lookup` from node:dns when it loads. Installed by -r, that reference is
// already the cached one; installed later in code, it would not be.
const { lookup } = require('node:dns')
const { execFileSync } = require('node:child_process')
const { installed } = require('io-hygiene')

function app () {
  const handle = installed()
  const dnsOn = Boolean(handle?.dns)
  // 200 concurrent lookups through the captured reference; libuv's active
  // requests show how many getaddrinfo calls are in flight at once.
  let done = 0
  for (let i = 0; i < 200; i++) {
    lookup('localhost', { family: 4 }, (err) => {
      if (err) throw err
      if (++done === 200) {
        console.log(`  installed before the app: ${handle ? 'yes' : 'no'}, dns module: ${dnsOn ? 'on' : 'off'}; ` +
          `200 lookups: ${peak} getaddrinfo calls in flight at the peak`)
      }
    })
  }
  const peak = process.getActiveResourcesInfo().filter((type) => type === 'GetAddrInfoReqWrap').length
}

if (process.env.EXAMPLE_REGISTER_CHILD) {
  app()
} else {
  for (const env of [{}, { IO_HYGIENE_DNS: '0' }, { IO_HYGIENE_DNS_MAX_TTL_MS: '5min' }]) {
    const vars = Object.entries(env).map(([k, v]) => `${k}=${v} `).join('')
    console.log(`${vars}node -r io-hygiene/register examples/register.js`)
    try {
      process.stdout.write(execFileSync(process.execPath, ['-r', 'io-hygiene/register', __filename], {
        env: { ...process.env, ...env, EXAMPLE_REGISTER_CHILD: '1' },
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      }))
    } catch (err) {
      const code = /ERR_IO_HYGIENE_[A-Z_]+/.exec(err.stderr)?.[0]
      if (!code) throw err
      console.log(`  refused to start (exit ${err.status}): ${code}`)
    }
  }
}
