// s3rver with AWS Signature Version 4 checked: the S3-compatible server of
// the tests and the compose stack.
//
// s3rver 3.7 parses SigV4 Authorization headers but does not check them
// (its authentication middleware accepts any V4 signature), so a wrong
// secret would pass unnoticed. This runs s3rver with a middleware in front
// of its own that recomputes each request's signature from the secret and
// answers 403 SignatureDoesNotMatch (or InvalidAccessKeyId) as S3 does.
// Requests must carry x-amz-content-sha256 (S3 requires it; it is signed
// as the payload hash). Unsigned requests are refused too (403
// AccessDenied): every test bucket is private.
//
//   node s3_server.js --directory DIR --port 0 [--address 127.0.0.1]
//        [--access-key S3RVER --secret-key S3RVER] [--bucket NAME ...]
//        [--port-file FILE]
// Prints "listening on ADDRESS:PORT" and writes the port to --port-file
// once it serves.
'use strict';
const crypto = require('crypto');
const fs = require('fs');
const S3rver = require('s3rver');

function parseArgs(argv) {
  const options = {
    directory: null, port: 0, address: '127.0.0.1', accessKey: 'S3RVER',
    secretKey: 'S3RVER', buckets: [], portFile: null,
  };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    switch (flag) {
      case '--directory': options.directory = value; break;
      case '--port': options.port = Number(value); break;
      case '--address': options.address = value; break;
      case '--access-key': options.accessKey = value; break;
      case '--secret-key': options.secretKey = value; break;
      case '--bucket': options.buckets.push(value); break;
      case '--port-file': options.portFile = value; break;
      default: throw new Error(`unknown flag ${flag}`);
    }
  }
  if (!options.directory) throw new Error('--directory is required');
  return options;
}

// RFC 3986 encoding as SigV4 wants it: unreserved characters kept.
function awsEncode(text) {
  return encodeURIComponent(text).replace(
      /[!'()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());
}

function hmac(key, text) {
  return crypto.createHmac('sha256', key).update(text, 'utf8').digest();
}

function sha256Hex(text) {
  return crypto.createHash('sha256').update(text, 'utf8').digest('hex');
}

// The signature the request should carry, or an error code.
function expectedSignature(req, authorization, accessKey, secretKey) {
  const match = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, *SignedHeaders=([^,]+), *Signature=([0-9a-f]+)$/
      .exec(authorization);
  if (!match) return {error: 'AuthorizationHeaderMalformed'};
  const [, keyId, date, region, service, signedHeaders, signature] = match;
  if (keyId !== accessKey) return {error: 'InvalidAccessKeyId'};
  const [rawPath, rawQuery = ''] = req.url.split('?', 2);
  const canonicalPath = rawPath.split('/')
      .map((segment) => awsEncode(decodeURIComponent(segment))).join('/');
  const canonicalQuery = rawQuery === '' ? '' : rawQuery.split('&')
      .map((pair) => {
        const [key, value = ''] = pair.split('=', 2);
        const decode = (s) => decodeURIComponent(s.replace(/\+/g, ' '));
        return [awsEncode(decode(key)), awsEncode(decode(value))];
      })
      .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 :
                       a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0))
      .map(([key, value]) => `${key}=${value}`).join('&');
  const names = signedHeaders.split(';');
  const canonicalHeaders = names.map((name) => {
    const value = req.headers[name];
    const text = Array.isArray(value) ? value.join(',') : (value || '');
    return `${name}:${text.trim().replace(/\s+/g, ' ')}\n`;
  }).join('');
  const payloadHash = req.headers['x-amz-content-sha256'];
  const canonicalRequest = [req.method, canonicalPath, canonicalQuery,
    canonicalHeaders, signedHeaders, payloadHash].join('\n');
  const scope = `${date}/${region}/${service}/aws4_request`;
  const stringToSign = ['AWS4-HMAC-SHA256', req.headers['x-amz-date'], scope,
    sha256Hex(canonicalRequest)].join('\n');
  const key = hmac(hmac(hmac(hmac('AWS4' + secretKey, date), region), service),
                   'aws4_request');
  const expected = crypto.createHmac('sha256', key).update(stringToSign, 'utf8')
      .digest('hex');
  return {expected, signature};
}

function s3Error(ctx, status, code, message) {
  ctx.status = status;
  ctx.type = 'application/xml';
  ctx.body = '<?xml version="1.0" encoding="UTF-8"?>\n' +
      `<Error><Code>${code}</Code><Message>${message}</Message></Error>`;
}

function checkSignature(accessKey, secretKey) {
  return async function(ctx, next) {
    const authorization = ctx.req.headers['authorization'];
    if (!authorization) {
      return s3Error(ctx, 403, 'AccessDenied', 'Anonymous access is refused');
    }
    if (!ctx.req.headers['x-amz-content-sha256'] ||
        !ctx.req.headers['x-amz-date']) {
      return s3Error(ctx, 400, 'InvalidRequest',
                     'x-amz-content-sha256 and x-amz-date must be signed');
    }
    const result = expectedSignature(ctx.req, authorization, accessKey,
                                     secretKey);
    if (result.error === 'InvalidAccessKeyId') {
      return s3Error(ctx, 403, result.error,
                     'The AWS Access Key Id you provided does not exist');
    }
    if (result.error) {
      return s3Error(ctx, 400, result.error, 'Malformed Authorization header');
    }
    if (result.expected !== result.signature) {
      return s3Error(ctx, 403, 'SignatureDoesNotMatch',
                     'The request signature we calculated does not match ' +
                     'the signature you provided. Check your key and ' +
                     'signing method.');
    }
    return next();
  };
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const server = new S3rver({
    directory: options.directory, port: options.port,
    address: options.address, silent: true, vhostBuckets: true,
    configureBuckets: options.buckets.map((name) => ({name, configs: []})),
  });
  // s3rver is a Koa application: this middleware runs before its own.
  server.middleware.unshift(checkSignature(options.accessKey,
                                           options.secretKey));
  const {address, port} = await server.run();
  if (options.portFile) {
    fs.writeFileSync(options.portFile + '.tmp', `${port}\n`);
    fs.renameSync(options.portFile + '.tmp', options.portFile);
  }
  console.log(`listening on ${address}:${port}`);
  const stop = () => server.close().then(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((error) => {
  console.error(`s3_server: ${error.message}`);
  process.exit(2);
});
