// theme: the workbench's light and dark palettes (Fusion style), or the
// platform's own. Widgets read colours from the palette, so plots, grids and
// tables follow a change.
#pragma once

#include <QString>
#include <QStringList>

namespace stoker {

QStringList themeNames();  // "system", "light", "dark"
// Applies the theme to the running QApplication; false for an unknown name.
bool applyTheme(const QString& name);

}  // namespace stoker
