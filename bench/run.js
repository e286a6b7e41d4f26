'use strict'

// `npm run bench`: every module's benchmark, one after another (they share two
// cores, so never at once), each starting and stopping its own local servers.
// Arguments (e.g. --json) pass through to each benchmark.
const { spawnSync } = require('node:child_process')
const path = require('node:path')

const benches = ['dns.js', 'statsd.js', 'batch.js', 'kafka.js', 'http.js', 'monitor.js', 'overhead.js']
let failed = 0
for (const file of benches) {
  const result = spawnSync(process.execPath, [path.join(__dirname, file), ...process.argv.slice(2)], { stdio: 'inherit' })
  if (result.status !== 0) {
    failed++
    process.stderr.write(`bench/${file} failed (exit ${result.status ?? result.signal})\n`)
  }
}
process.exitCode = failed === 0 ? 0 : 1
