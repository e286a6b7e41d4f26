'use strict'

// What npm publishes is what users get: the packed tarball holds exactly the
// files the package needs, installs into an empty folder (offline, from npm's
// cache: the dependencies' tarballs are there once `npm ci` ran here), and
// `require('io-hygiene').install()` works there, as does `-r io-hygiene/register`.
// npm runs in this test's environment: on a machine whose npm cache lacks the
// dependencies' tarballs, `npm ci --offline` fails and says which.
const t = require('tap')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { execFile } = require('node:child_process')

const root = path.join(__dirname, '..')

function run (file, args, cwd) {
  return new Promise((resolve, reject) => {
    execFile(file, args, { cwd, encoding: 'utf8', timeout: 120_000, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) {
        error.message += `\n${stdout}\n${stderr}`
        return reject(error)
      }
      resolve(stdout)
    })
  })
}

// A lockfile for an app whose one dependency is the tarball: its entry, and
// every runtime dependency's entry (transitively) from this repository's lock.
function appLock (pkg, tarball, integrity) {
  const lock = require('../package-lock.json')
  const packages = {
    '': { name: 'app', version: '1.0.0', dependencies: { [pkg.name]: tarball } },
    [`node_modules/${pkg.name}`]: {
      version: pkg.version,
      resolved: tarball,
      integrity,
      license: pkg.license,
      dependencies: pkg.dependencies,
      engines: pkg.engines,
      peerDependencies: pkg.peerDependencies,
      peerDependenciesMeta: pkg.peerDependenciesMeta,
    },
  }
  const pending = Object.keys(pkg.dependencies ?? {})
  while (pending.length > 0) {
    const name = pending.pop()
    const key = `node_modules/${name}`
    if (packages[key]) continue
    const entry = lock.packages[key]
    if (!entry) throw new Error(`package-lock.json has no ${key}`)
    packages[key] = entry
    pending.push(...Object.keys(entry.dependencies ?? {}))
  }
  return { name: 'app', version: '1.0.0', lockfileVersion: 3, requires: true, packages }
}

t.test('the packed tarball installs into an empty folder and install() works there', async (t) => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-pack-'))
  t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))
  const packDir = path.join(tmp, 'pack')
  const appDir = path.join(tmp, 'app')
  fs.mkdirSync(packDir)
  fs.mkdirSync(appDir)

  const [packed] = JSON.parse(await run('npm', ['pack', '--json', '--pack-destination', packDir], root))
  const files = packed.files.map((f) => f.path).sort()
  const pkg = require('../package.json')
  t.equal(packed.name, pkg.name)
  t.equal(packed.version, pkg.version)
  for (const needed of ['package.json', 'index.js', 'lib/install.js', 'register.js', 'register', 'types/index.d.ts', 'README.md', 'CHANGELOG.md', 'LICENSE']) {
    t.ok(files.includes(needed), `the tarball holds ${needed}`)
  }
  const extra = files.filter((f) => /^(test|bench|examples|coverage|\.cache|\.tap|node_modules|\.ci)\//.test(f) || /\.test-d\.ts$/.test(f))
  t.same(extra, [], 'and no tests, benchmarks, examples or caches')
  for (const main of [pkg.main, pkg.types, 'register.js']) {
    t.ok(files.includes(path.normalize(main)), `every entry point is packed: ${main}`)
  }

  // An app that depends on the tarball, locked to the dependency versions
  // this repository's lock holds, so that `npm ci --offline` needs only
  // tarballs already in npm's cache (a bare `npm install --offline` also
  // needs each dependency's registry document cached, which a clean
  // `npm ci` checkout does not leave there).
  const tarball = `file:../pack/${packed.filename}`
  fs.writeFileSync(path.join(appDir, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true, dependencies: { [pkg.name]: tarball } }))
  fs.writeFileSync(path.join(appDir, 'package-lock.json'), JSON.stringify(appLock(pkg, tarball, packed.integrity)))
  await run('npm', ['ci', '--offline', '--no-audit', '--no-fund'], appDir)
  t.ok(fs.existsSync(path.join(appDir, 'node_modules', 'io-hygiene', 'index.js')), 'installed')
  t.notOk(fs.existsSync(path.join(appDir, 'node_modules', 'kafkajs')), 'optional peers are not pulled in')

  const cjs = await run(process.execPath, ['-e', `
    const dns = require('node:dns')
    const original = dns.lookup
    const { install, uninstall } = require('io-hygiene')
    const handle = install()
    if (dns.lookup === original) throw new Error('dns.lookup was not patched')
    dns.lookup('localhost', (err) => {
      if (err) throw err
      console.log('hits+misses', handle.dns.stats().misses + handle.dns.stats().hits)
      console.log('restored', uninstall() && dns.lookup === original)
    })
  `], appDir)
  t.match(cjs, /^hits\+misses 1$/m, 'install() works from the installed package')
  t.match(cjs, /^restored true$/m, 'and uninstall() restores')

  const register = await run(process.execPath, ['-r', 'io-hygiene/register', '-e', "console.log('installed', require('io-hygiene').installed() !== null)"], appDir)
  t.match(register, /^installed true$/m, '-r io-hygiene/register installs')
  const imported = await run(process.execPath, ['--import', 'io-hygiene/register.js', '--input-type=module', '-e', "import { installed } from 'io-hygiene'; console.log('imported', installed() !== null)"], appDir)
  t.match(imported, /^imported true$/m, '--import io-hygiene/register.js installs')
  // The bare name, as -r takes it: patched before the app's first import.
  fs.writeFileSync(path.join(appDir, 'app.mjs'), "import { installed } from 'io-hygiene'\nconsole.log('bare', installed()?.dns != null)\n")
  const bare = await run(process.execPath, ['--import', 'io-hygiene/register', 'app.mjs'], appDir)
  t.match(bare, /^bare true$/m, '--import io-hygiene/register installs')

  const esm = await run(process.execPath, ['--input-type=module', '-e', "import { install } from 'io-hygiene'; console.log('esm', typeof install)"], appDir)
  t.match(esm, /^esm function$/m, 'ESM named imports work')
})
