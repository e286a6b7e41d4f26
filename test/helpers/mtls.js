'use strict'

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { execFileSync } = require('node:child_process')

// A throwaway CA, a server certificate for localhost and a client
// certificate, made with openssl in a temporary directory (removed by
// t.teardown). Returns PEM strings: { ca, serverCert, serverKey, clientCert, clientKey }.
function makeCertificates (t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-mtls-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const at = (name) => path.join(dir, name)
  const openssl = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' })
  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=io-hygiene test CA', '-keyout', 'ca.key', '-out', 'ca.pem')
  fs.writeFileSync(at('server.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n')
  for (const [name, cn, ext] of [['server', 'localhost', ['-extfile', 'server.ext']], ['client', 'io-hygiene client', []]]) {
    openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${cn}`, '-keyout', `${name}.key`, '-out', `${name}.csr`)
    openssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '1', '-out', `${name}.pem`, ...ext)
  }
  const read = (name) => fs.readFileSync(at(name), 'utf8')
  return { ca: read('ca.pem'), serverCert: read('server.pem'), serverKey: read('server.key'), clientCert: read('client.pem'), clientKey: read('client.key') }
}

module.exports = { makeCertificates }
