/**
 * Paths of the workspace as the UI and the model name them: absolute, in the reference image's layout
 * (`/workspace/project`, `/workspace/<file>`) or in the workspace's own, mapped into the workspace wherever it lies
 * (the process runtime's workspace is elsewhere), and checked to stay inside it.
 */
import { lstatSync, realpathSync } from "node:fs";
import { dirname, isAbsolute, relative, resolve } from "node:path";

/** The absolute path inside the workspace that `raw` names, or null. */
export function inWorkspace(raw: string, workspaceDir: string): string | null {
  const inside = (p: string): boolean => {
    const rel = relative(workspaceDir, p);
    return !rel.startsWith("..") && !isAbsolute(rel);
  };
  const direct = resolve(raw);
  if (inside(direct)) return direct;
  for (const prefix of ["/workspace/project", "/workspace"]) {
    if (raw === prefix || raw.startsWith(`${prefix}/`)) {
      const mapped = resolve(workspaceDir, `.${raw.slice(prefix.length)}`);
      return inside(mapped) ? mapped : null;
    }
  }
  return null;
}

/**
 * {@link inWorkspace}, also once symlinks are followed: the real path of the deepest entry on the way that exists
 * (a symlink counts as existing, and one that leads nowhere is refused) must lie inside the workspace's real path
 * (a link in the workspace to `/` or to another folder names no file here, nor does a dangling one, which a write
 * would create where it points). These routes answer the UI; the agent's own tools (shell, file editor) are
 * bounded by the sandbox, not by this check.
 */
export function realInWorkspace(raw: string, workspaceDir: string): string | null {
  const target = inWorkspace(raw, workspaceDir);
  if (target === null) return null;
  try {
    const base = realpathSync(workspaceDir);
    let existing = target;
    while (!entryExists(existing) && existing !== dirname(existing)) existing = dirname(existing);
    // Throws for a symlink that leads nowhere (or in a loop): refused.
    const rel = relative(base, realpathSync(existing));
    return rel.startsWith("..") || isAbsolute(rel) ? null : target;
  } catch {
    return null;
  }
}

/** True when `path` names an entry, a symlink included (existsSync follows links, and says no for a dangling one). */
function entryExists(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}
