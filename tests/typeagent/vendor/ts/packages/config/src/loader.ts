// Copyright (c) Microsoft Corporation.
// Licensed under the MIT License.

import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import yaml from "js-yaml";
import dotenv from "dotenv";
import registerDebug from "debug";

import { flatten, mergeFlat, type FlattenOptions } from "./flatten.js";
import { fetchKeyVaultConfig } from "./keyVault.js";
import { validateConfigTree } from "./schema.js";
import {
    ComputeConfigDriftOptions,
    ConfigDrift,
    ConfigSource,
    ConfigTree,
    FlatEnv,
    LoadConfigOptions,
    LoadConfigResult,
    SourceMap,
} from "./types.js";

const debug = registerDebug("typeagent:config");

/**
 * The TypeAgent user data directory (`~/.typeagent`, overridable via
 * `TYPEAGENT_USER_DATA_DIR`). This mirrors `getUserDataDir()` in
 * agent-dispatcher; it is re-implemented here because `@typeagent/config`
 * is a low-level package that must not depend on the dispatcher. It is the
 * fallback home for config files on a machine without the repo checked out
 * (where the installer / getKeys writes `config.local.yaml`).
 */
function userDataDir(): string {
    return (
        process.env.TYPEAGENT_USER_DATA_DIR ??
        path.join(os.homedir(), ".typeagent")
    );
}

/**
 * Locate the TypeAgent `ts/` workspace root by walking up from this source
 * file. The package lives at `ts/packages/config/dist/loader.js` once built
 * (or `src/loader.ts` when run from source), so we walk up and verify by
 * looking for `pnpm-workspace.yaml`. Returns `undefined` when not found —
 * e.g. a repo-less install where the bundled code does not sit inside the
 * monorepo.
 */
function findWorkspaceRoot(): string | undefined {
    const here = path.dirname(fileURLToPath(import.meta.url));
    let candidate = here;
    for (let i = 0; i < 8; i++) {
        if (
            fs.existsSync(path.join(candidate, "pnpm-workspace.yaml")) &&
            fs.existsSync(path.join(candidate, "package.json"))
        ) {
            return candidate;
        }
        const parent = path.dirname(candidate);
        if (parent === candidate) break;
        candidate = parent;
    }
    return undefined;
}

interface ResolvedConfigPaths {
    defaultsPath: string;
    localPath: string;
    dotEnvPath: string;
}

type ConfigLayer = { source: ConfigSource; flat: FlatEnv };

/**
 * Absolute path of the `config.local.yaml` this process would load, resolved
 * with the same precedence as {@link loadConfigSync}. Used by setup hints so
 * they can point at (and link to) the actual file on this machine rather than
 * a generic repo-relative path. Returns the path whether or not it exists.
 */
export function resolveLocalConfigPath(
    options: LoadConfigOptions = {},
): string {
    return resolveConfigPaths(options).localPath;
}

/**
 * Resolve the three config file paths. Precedence per file:
 *   explicit option  >  dedicated env var  >  `<configDir>/<filename>`
 * where `configDir` is, in order:
 *   `options.workspaceRoot` > `TYPEAGENT_CONFIG_DIR` > the detected `ts/`
 *   workspace root (dev / in-repo) > the user data dir (`~/.typeagent`).
 *
 * In a normal in-repo run the workspace root is detected, so behavior is
 * unchanged. On a machine without the repo, files resolve under
 * `~/.typeagent` (where the installer / getKeys writes `config.local.yaml`),
 * and individual files can be redirected with the env vars below — e.g. the
 * service launcher points `TYPEAGENT_CONFIG_DEFAULTS` at the
 * `config.defaults.yaml` shipped alongside the executable.
 */
function resolveConfigPaths(options: LoadConfigOptions): ResolvedConfigPaths {
    const configDir =
        options.workspaceRoot ??
        process.env.TYPEAGENT_CONFIG_DIR ??
        findWorkspaceRoot() ??
        userDataDir();
    return {
        defaultsPath:
            options.defaultsPath ??
            process.env.TYPEAGENT_CONFIG_DEFAULTS ??
            path.join(configDir, "config.defaults.yaml"),
        localPath:
            options.localPath ??
            process.env.TYPEAGENT_CONFIG_LOCAL ??
            path.join(configDir, "config.local.yaml"),
        dotEnvPath:
            options.dotEnvPath ??
            process.env.TYPEAGENT_DOTENV ??
            path.join(configDir, ".env"),
    };
}

function readYamlFile(filePath: string): ConfigTree | null {
    if (!fs.existsSync(filePath)) {
        return null;
    }
    const text = fs.readFileSync(filePath, "utf8");
    const data = yaml.load(text, { filename: filePath });
    if (data === null || data === undefined) {
        return null;
    }
    if (typeof data !== "object" || Array.isArray(data)) {
        throw new Error(
            `Config file ${filePath} must contain a YAML mapping at the top level.`,
        );
    }
    validateConfigTree(data, filePath);
    return data as ConfigTree;
}

function readDotEnvFile(filePath: string): FlatEnv {
    if (!fs.existsSync(filePath)) {
        return {};
    }
    const text = fs.readFileSync(filePath, "utf8");
    const parsed = dotenv.parse(text);
    return parsed;
}

/**
 * A top-level section of a config file that failed to convert and was
 * therefore skipped — most often a leftover `<value>` placeholder or a
 * value of the wrong type. Reported instead of silently dropping the
 * whole file, which used to leave everything looking "not configured".
 */
export interface ConfigProblem {
    /** Absolute path of the file the section came from. */
    readonly file: string;
    /** Top-level key, e.g. `spotify`. */
    readonly section: string;
    /** Converter message, e.g. `Expected a number at 'spotify.port'`. */
    readonly message: string;
}

let configProblems: ConfigProblem[] = [];
const warnedProblems = new Set<string>();

/**
 * Sections skipped by the most recent load. Setup/readiness checks use
 * this to explain "you configured it, but the value is invalid" rather
 * than reporting the setting as missing.
 */
export function getConfigProblems(): ConfigProblem[] {
    return configProblems;
}

function flattenOptions(file: string): FlattenOptions {
    // Section errors are always non-fatal: one mistyped value shouldn't
    // take down the whole file (which reads to the user as "nothing is
    // configured", the exact confusion this reporting exists to avoid).
    // File-level errors — unreadable file, invalid YAML — still honor
    // `strict`.
    return {
        onSectionError: (section, error) => {
            configProblems.push({ file, section, message: error.message });
            const key = `${file}:${section}:${error.message}`;
            if (!warnedProblems.has(key)) {
                warnedProblems.add(key);
                console.warn(
                    `Warning: skipping '${section}:' in ${file} — ${error.message}`,
                );
            }
        },
    };
}

/**
 * Synchronous loader used by tests and any entry point that cannot
 * await. Reads YAML files and the `.env` fallback only — never reaches
 * out to Key Vault.
 *
 * Precedence (low → high): `.env` → defaults → local → caller-provided
 * `process.env`-style overrides via the `populateProcessEnv` flag.
 */
export function loadConfigSync(
    options: LoadConfigOptions = {},
): LoadConfigResult {
    const { defaultsPath, localPath, dotEnvPath } = resolveConfigPaths(options);
    const trackSources = options.trackSources ?? false;
    const populateProcessEnv = options.populateProcessEnv ?? true;
    const strict = options.strict ?? true;
    configProblems = [];

    debug(
        "loading config (defaults=%s, local=%s, dotenv=%s)",
        defaultsPath,
        localPath,
        dotEnvPath,
    );

    const layers: ConfigLayer[] = [];

    // .env (legacy fallback, lowest precedence)
    try {
        const envFlat = readDotEnvFile(dotEnvPath);
        if (Object.keys(envFlat).length > 0) {
            layers.push({ source: ConfigSource.DotEnv, flat: envFlat });
        }
    } catch (err) {
        if (strict) throw err;
        debug("error reading .env (continuing): %s", err);
    }

    // config.defaults.yaml
    try {
        const tree = readYamlFile(defaultsPath);
        if (tree) {
            layers.push({
                source: ConfigSource.Defaults,
                flat: flatten(tree, flattenOptions(defaultsPath)),
            });
        }
    } catch (err) {
        if (strict) throw err;
        debug("error reading defaults (continuing): %s", err);
    }

    // config.local.yaml
    try {
        const tree = readYamlFile(localPath);
        if (tree) {
            layers.push({
                source: ConfigSource.Local,
                flat: flatten(tree, flattenOptions(localPath)),
            });
        }
    } catch (err) {
        if (strict) throw err;
        debug("error reading local (continuing): %s", err);
    }

    // Merge in precedence order (later layers win).
    const merged: FlatEnv = mergeFlat(...layers.map((l) => l.flat));

    let sources: SourceMap | undefined;
    if (trackSources) {
        sources = {};
        for (const layer of layers) {
            for (const k of Object.keys(layer.flat)) {
                sources[k] = layer.source;
            }
        }
        // Pre-existing process.env values are tracked but not
        // overwritten — they sit at the top of the precedence chain
        // when populateProcessEnv chooses not to clobber them. (See
        // below.)
    }

    if (populateProcessEnv) {
        rememberReloadState(localPath, layers);
        applyToProcessEnv(merged, sources);
    }

    debug(
        "loaded %d keys from %d layer(s)",
        Object.keys(merged).length,
        layers.length,
    );

    return sources !== undefined ? { env: merged, sources } : { env: merged };
}

/**
 * Async loader. Performs the same work as `loadConfigSync` plus the
 * optional Key Vault fetch when `options.keyVault` is supplied.
 *
 * Existing entry points should `await loadConfig()` once at startup,
 * before any code that reads `process.env`.
 *
 * Precedence (low → high): `.env` → defaults → Key Vault → local →
 * pre-existing `process.env`.
 */
export async function loadConfig(
    options: LoadConfigOptions = {},
): Promise<LoadConfigResult> {
    if (!options.keyVault) {
        return loadConfigSync(options);
    }

    // Fetch the Key Vault layer first, then run the sync loader with
    // the rest of the precedence chain. We splice the KV layer in at
    // the correct position by routing through a custom assembly path.
    const { defaultsPath, localPath, dotEnvPath } = resolveConfigPaths(options);
    const trackSources = options.trackSources ?? false;
    const populateProcessEnv = options.populateProcessEnv ?? true;
    const strict = options.strict ?? true;

    // Resolve vault name. If the caller didn't supply one, do a quick
    // sync pre-pass of defaults+local to discover TYPEAGENT_SHAREDVAULT
    // (the flat form of `vault.shared`).
    let vaultName = options.keyVault.vaultName;
    if (!vaultName) {
        const preLayers: { source: ConfigSource; flat: FlatEnv }[] = [];
        pushYamlLayer(preLayers, ConfigSource.Defaults, defaultsPath, false);
        pushYamlLayer(preLayers, ConfigSource.Local, localPath, false);
        pushFileLayer(
            preLayers,
            ConfigSource.DotEnv,
            () => readDotEnvFile(dotEnvPath),
            false,
            ".env",
        );
        const preMerged = mergeFlat(...preLayers.map((l) => l.flat));
        vaultName = preMerged.TYPEAGENT_SHAREDVAULT;
        if (!vaultName) {
            debug(
                "key vault requested but no vault name supplied and " +
                    "vault.shared not found in defaults/local — skipping KV layer",
            );
            return loadConfigSync(options);
        }
        debug("auto-discovered vault name: %s", vaultName);
    }

    debug("loading config with key vault (vault=%s)", vaultName);

    // Discard anything the vault-name pre-pass reported; the layers
    // below are re-read and re-report on their own.
    configProblems = [];
    const layers: { source: ConfigSource; flat: FlatEnv }[] = [];

    // .env
    pushFileLayer(
        layers,
        ConfigSource.DotEnv,
        () => readDotEnvFile(dotEnvPath),
        strict,
        ".env",
    );

    // defaults
    pushYamlLayer(layers, ConfigSource.Defaults, defaultsPath, strict);

    // Key Vault (between defaults and local, per the locked design)
    try {
        const tree = await fetchKeyVaultConfig({
            ...options.keyVault,
            vaultName,
            failOnError: options.keyVault.failOnError ?? strict,
        });
        if (tree) {
            layers.push({
                source: ConfigSource.KeyVault,
                flat: flatten(tree, flattenOptions("key vault")),
            });
        }
    } catch (err) {
        if (strict) throw err;
        debug("key vault layer skipped: %s", err);
    }

    // local
    pushYamlLayer(layers, ConfigSource.Local, localPath, strict);

    return finalize(layers, populateProcessEnv, trackSources, localPath);
}

/**
 * Push a flat env layer (read from a `.env` file) into the layers
 * array, honoring `strict` mode for error handling. Helper extracted
 * so `loadConfig` and `loadConfigSync` share identical semantics.
 */
function pushFileLayer(
    layers: { source: ConfigSource; flat: FlatEnv }[],
    source: ConfigSource,
    read: () => FlatEnv,
    strict: boolean,
    label: string,
): void {
    try {
        const flat = read();
        if (Object.keys(flat).length > 0) {
            layers.push({ source, flat });
        }
    } catch (err) {
        if (strict) throw err;
        debug("error reading %s (continuing): %s", label, err);
    }
}

/**
 * Push a YAML layer into the layers array, honoring `strict` mode.
 */
function pushYamlLayer(
    layers: { source: ConfigSource; flat: FlatEnv }[],
    source: ConfigSource,
    filePath: string,
    strict: boolean,
): void {
    try {
        const tree = readYamlFile(filePath);
        if (tree) {
            layers.push({
                source,
                flat: flatten(tree, flattenOptions(filePath)),
            });
        }
    } catch (err) {
        if (strict) throw err;
        debug("error reading %s (continuing): %s", filePath, err);
    }
}

/**
 * Merge layers in precedence order, optionally produce a source map,
 * and (optionally) push the result into `process.env`.
 */
function finalize(
    layers: ConfigLayer[],
    populateProcessEnv: boolean,
    trackSources: boolean,
    localPath?: string,
): LoadConfigResult {
    const merged: FlatEnv = mergeFlat(...layers.map((l) => l.flat));

    let sources: SourceMap | undefined;
    if (trackSources) {
        sources = {};
        for (const layer of layers) {
            for (const k of Object.keys(layer.flat)) {
                sources[k] = layer.source;
            }
        }
    }

    if (populateProcessEnv) {
        if (localPath !== undefined) {
            rememberReloadState(localPath, layers);
        }
        applyToProcessEnv(merged, sources);
    }

    debug(
        "loaded %d keys from %d layer(s)",
        Object.keys(merged).length,
        layers.length,
    );

    return sources !== undefined ? { env: merged, sources } : { env: merged };
}

interface ReloadState {
    readonly inheritedValue: string | undefined;
    readonly restoreInheritedValue: boolean;
}

const reloadState = new Map<string, ReloadState>();

function rememberReloadState(
    localPath: string,
    layers: readonly ConfigLayer[],
): void {
    const local =
        layers.find(({ source }) => source === ConfigSource.Local)?.flat ?? {};
    const lower = mergeFlat(
        ...layers
            .filter(({ source }) => source !== ConfigSource.Local)
            .map(({ flat }) => flat),
    );
    const lowerSources: SourceMap = {};
    for (const layer of layers) {
        if (layer.source === ConfigSource.Local) {
            continue;
        }
        for (const key of Object.keys(layer.flat)) {
            lowerSources[key] = layer.source;
        }
    }
    const keys = new Set([...Object.keys(lower), ...Object.keys(local)]);
    for (const key of keys) {
        const stateKey = `${localPath}\0${key}`;
        if (reloadState.has(stateKey)) {
            continue;
        }
        const current = process.env[key];
        const processValueWins =
            current !== undefined && current !== local[key];
        reloadState.set(stateKey, {
            inheritedValue: processValueWins ? current : lower[key],
            restoreInheritedValue:
                processValueWins || lowerSources[key] === ConfigSource.KeyVault,
        });
    }
}

/**
 * Re-read only the legacy env keys used by one agent.
 *
 * Local values override the inherited startup value while present. Removing a
 * local override restores that inherited value (including a value populated by
 * Key Vault in the parent process), or deletes the key when no inherited value
 * existed. Keys outside `keys` are never changed.
 */
export function reloadConfigKeysSync(
    keys: readonly string[],
    options: LoadConfigOptions = {},
): string[] {
    const paths = resolveConfigPaths(options);
    loadConfigSync({
        ...options,
        strict: true,
        populateProcessEnv: false,
    });
    const localTree = readYamlFile(paths.localPath);
    const local = localTree
        ? flatten(localTree, { onSectionError: () => {} })
        : {};
    const defaultsTree = readYamlFile(paths.defaultsPath);
    const lower = mergeFlat(
        readDotEnvFile(paths.dotEnvPath),
        defaultsTree
            ? flatten(defaultsTree, flattenOptions(paths.defaultsPath))
            : {},
    );
    const changed: string[] = [];
    for (const key of keys) {
        const stateKey = `${paths.localPath}\0${key}`;
        let state = reloadState.get(stateKey);
        if (state === undefined) {
            const current = process.env[key];
            const localValue = local[key];
            const lowerValue = lower[key];
            state = {
                inheritedValue:
                    current !== undefined && current !== localValue
                        ? current
                        : lowerValue,
                restoreInheritedValue:
                    current !== undefined &&
                    current !== localValue &&
                    current !== lowerValue,
            };
            reloadState.set(stateKey, state);
        }
        const value =
            local[key] ??
            (state.restoreInheritedValue ? state.inheritedValue : lower[key]);
        if (process.env[key] === value) {
            continue;
        }
        if (value === undefined) {
            delete process.env[key];
        } else {
            process.env[key] = value;
        }
        changed.push(key);
    }
    debug("reloaded config, %d key(s) changed", changed.length);
    return changed;
}

/**
 * Scoped reload for callers that must not fail because of it: a
 * broken or unreadable config file leaves whatever was loaded at startup
 * in place rather than turning "your Spotify settings are missing" into
 * an unrelated parse error. Returns the keys that changed, or none.
 *
 * This is what agents should call before reading their settings. An agent
 * process is forked with a snapshot of `process.env`, so without a reload
 * it can never observe an edit the user made after startup — which is
 * exactly what `@config agent refresh <agent>` promises to pick up.
 */
export function tryReloadConfigKeysSync(
    keys: readonly string[],
    options: LoadConfigOptions = {},
): string[] {
    try {
        return reloadConfigKeysSync(keys, options);
    } catch (e: any) {
        debug("config reload failed: %s", e?.message ?? e);
        return [];
    }
}

/**
 * Merge a flat env map into `process.env`. Existing values in
 * `process.env` are preserved — they sit at higher precedence than
 * any config file (matching how `dotenv.config()` behaved). This
 * lets developers override individual keys ad-hoc from the shell
 * without editing YAML.
 */
function applyToProcessEnv(merged: FlatEnv, sources?: SourceMap): void {
    for (const [key, value] of Object.entries(merged)) {
        if (process.env[key] === undefined) {
            process.env[key] = value;
        } else if (sources) {
            // Caller wants source tracking — record that the live
            // process env "won" against the config file value.
            sources[key] = ConfigSource.ProcessEnv;
        }
    }
}

/**
 * Compare the local config file (`config.local.yaml`) against the shared
 * Key Vault config and report the keys where they diverge. Used by the
 * agent-server to warn clients (on connect) that their local config is out of
 * sync with the shared vault - the same delivery path as the stale-build
 * notice.
 *
 * The Key Vault is the reference: a key drifts when the vault defines it and
 * the local file either omits it or sets a different value. Keys that exist
 * only locally are intentional local overrides / additions (local wins by
 * design) and are not reported.
 *
 * Returns `undefined` - meaning "no notice" - when there is nothing to compare
 * or nothing differs: no vault is configured, the vault holds no config (or the
 * fetch fails; the check is best-effort and never blocks startup), or the two
 * layers already agree.
 */
export async function computeConfigDrift(
    options: ComputeConfigDriftOptions = {},
): Promise<ConfigDrift | undefined> {
    const { localPath } = resolveConfigPaths(options);

    // Resolve the vault name the same way loadConfig does: an explicit option,
    // or auto-discovered from `vault.shared` (flattened to
    // TYPEAGENT_SHAREDVAULT) in the defaults / local layers.
    let vaultName = options.keyVault?.vaultName;
    if (!vaultName) {
        const pre = loadConfigSync({
            ...options,
            populateProcessEnv: false,
            strict: false,
        });
        vaultName = pre.env.TYPEAGENT_SHAREDVAULT;
    }
    if (!vaultName) {
        debug("config drift: no vault configured — skipping");
        return undefined;
    }

    // Fetch the vault config. Best-effort: a fetch / parse failure yields null
    // and no notice, matching the loader's offline-friendly behavior.
    const vaultTree = await fetchKeyVaultConfig({
        ...options.keyVault,
        vaultName,
        failOnError: false,
    });
    if (!vaultTree) {
        debug("config drift: vault has no config — skipping");
        return undefined;
    }

    let localTree: ConfigTree | null;
    try {
        localTree = readYamlFile(localPath);
    } catch (err) {
        // A malformed local file is the loader's problem to surface (strict
        // mode throws there); the drift check stays silent rather than
        // double-reporting.
        debug("config drift: could not read local config (%s) — skipping", err);
        return undefined;
    }

    const localFlat = flatten(localTree);
    const vaultFlat = flatten(vaultTree);
    const driftedKeys = Object.keys(vaultFlat)
        .filter((key) => localFlat[key] !== vaultFlat[key])
        .sort();

    if (driftedKeys.length === 0) {
        return undefined;
    }
    debug(
        "config drift: %d key(s) differ from vault %s",
        driftedKeys.length,
        vaultName,
    );
    return { vaultName, driftedKeys };
}
