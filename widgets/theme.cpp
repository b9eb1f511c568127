#include "theme.h"

#include <QApplication>
#include <QPalette>
#include <QStyle>
#include <QStyleFactory>

namespace stoker {
namespace {

QPalette darkPalette() {
  QPalette p;
  const QColor window(45, 45, 48), base(30, 30, 32), text(225, 225, 225), disabled(128, 128, 128);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, window);
  p.setColor(QPalette::ToolTipBase, base);
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, window);
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::BrightText, Qt::red);
  p.setColor(QPalette::Link, QColor(90, 160, 230));
  p.setColor(QPalette::Highlight, QColor(60, 120, 200));
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Mid, QColor(80, 80, 84));
  p.setColor(QPalette::PlaceholderText, disabled);
  for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
    p.setColor(QPalette::Disabled, role, disabled);
  return p;
}

}  // namespace

QStringList themeNames() { return {"system", "light", "dark"}; }

bool applyTheme(const QString& name) {
  if (!themeNames().contains(name)) return false;
  auto* app = qobject_cast<QApplication*>(QApplication::instance());
  if (!app) return false;
  static const QString platformStyle = app->style()->name();
  if (name == "system") {
    QApplication::setStyle(QStyleFactory::create(platformStyle));
    QApplication::setPalette(QApplication::style()->standardPalette());
    return true;
  }
  QApplication::setStyle(QStyleFactory::create("Fusion"));
  QApplication::setPalette(name == "dark" ? darkPalette() : QApplication::style()->standardPalette());
  return true;
}

}  // namespace stoker
